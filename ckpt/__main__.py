from ckpt.entry import main

main()
