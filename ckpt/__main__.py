from ckpt.cli import main

main()
