from replay.cli import console_main

console_main()
