"""The host side: runs on the GPU host with its own Python (standard library + what vLLM installs)."""
