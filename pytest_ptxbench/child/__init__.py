"""Evaluation children: processes the pytest process spawns for GPU work.

`candidate`: loads the untrusted library with no vendor GPU library (ctypes on libcudart only), runs it
on inputs it reads from files, and reports raw outputs and times. `trusted`: torch; generates the
inputs from the seed, computes references and times the baseline. Both speak JSON lines (`wire`).
"""
