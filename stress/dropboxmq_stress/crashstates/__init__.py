"""Crash-state exploration, ALICE-style (issue 31): record the file-system calls of one library
operation, enumerate every state a crash may leave under a persistence model, recover each as the
next process would and check the durability promises (spec/PROTOCOL.md, section Durability).

``python -m dropboxmq_stress.crashstates --help``; the pure core is :mod:`.model`, the recorder
:mod:`.record`, the operations :mod:`.operations`, the judge :mod:`.check`.
"""
