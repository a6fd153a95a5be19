"""Human in the loop: approval gates, client tools and the routing of answers.

``gates`` (the run loop's side: approval gates, client calls, suspending),
``routing`` (an answer checked at the root, routed hop by hop to its owner,
recorded, resumed), ``paused_abort`` (an abort reaching the children a paused
tree waits on). See ``specs/hitl.md``.
"""
