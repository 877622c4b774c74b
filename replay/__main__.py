from replay._console import main

main()
