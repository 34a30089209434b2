from kforge.cli import main

main()
