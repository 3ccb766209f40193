"""Lab-notebook scripts: each measures one thing quoted in the README."""
