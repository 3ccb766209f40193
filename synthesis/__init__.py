"""Synthesis of training tasks: crawl seed operators, compose them into KernelBench-format
problems, filter out broken, random, degenerate, mis-sized and contaminated ones, and write the
survivors with a parquet manifest (the paper's CUDA-Agent-Ops-6K recipe)."""
