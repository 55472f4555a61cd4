"""The benchmark: one test per (task, target, shape[, trajectory]), parametrized by the plugin from
the task files beside this module (`*.yaml`). Select with `-k gemm`, `-k attention_bwd`, `-m h100`."""


def test_task(ptx_case, ptx_bench):
    ptx_bench.evaluate(ptx_case)
