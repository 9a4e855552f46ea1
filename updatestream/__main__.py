from updatestream.cli import main

main()
