"""The replay engine: flat keys, trace streaming, policies' driver, time and energy."""
