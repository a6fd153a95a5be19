"""``helix-agents diff`` and ``helix-agents eval``: comparing branches of runs, evals from logs.

``diff_cmd`` (two sessions from their common prefix) and ``eval_cmd``
(recorded sessions re-run against today's agents and scored; the engine is
``helix_agents.testing.evals``). Specified in specs/evals.md.
"""
