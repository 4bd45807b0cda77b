"""Jobs, their attempts and the GPU memory reserved for them."""
