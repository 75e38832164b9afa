from edge_rl.cli import main

main()
