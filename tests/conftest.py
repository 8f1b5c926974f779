import torch

# Tests are small; one thread keeps them fast and deterministic on a shared 2-core machine.
torch.set_num_threads(1)
