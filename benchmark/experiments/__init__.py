"""Lab-notebook scripts: each measures one thing and prints a table (run with python -m)."""
