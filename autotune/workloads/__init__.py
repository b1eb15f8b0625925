"""Real workloads for the measurement backends (issue 5): a Llama-style model trained with
torch.distributed on CPU processes, and the launcher that runs its ranks."""
