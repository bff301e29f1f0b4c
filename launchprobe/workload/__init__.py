"""The synthetic Llama-shaped decode workload: shapes, cost model, the decode step and its execution modes."""
