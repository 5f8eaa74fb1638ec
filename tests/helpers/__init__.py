"""What several test modules use, kept here so no test imports another."""
