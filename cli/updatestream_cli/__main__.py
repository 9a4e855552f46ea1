from updatestream_cli.main import main

main()
