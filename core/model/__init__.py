"""What a model is: its config (with transformers' defaults), its layer kinds and their bytes, its parameters."""
