"""Plans for a whole training run: checkpoint intervals, costs and goodput at an MTBF."""
