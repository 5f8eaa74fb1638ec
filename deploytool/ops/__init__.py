"""What deploytool does on hosts: one call per host command (control), the server, deploy, pull, plan,
export, and tail's driver (follow). Uses connectors and config; shows nothing (views/ does)."""
