"""HRM with DeepLoop residual scaling: model, losses, optimizers, checkpoints, diagnostics."""
