"""`sead-ray view`: a local web page over run directories (sead_ray/view/app.py serves it).

- files.py: the viewed folder (paths confined to it), what it holds (runs, comparisons, evaluations,
  talks), and JSON Lines files read by byte offset (a line index built once and extended as a file grows,
  torn lines counted and skipped: a multi-GB dialogues file is never read whole into memory or the page);
- calls.py: the compact summary of each call the dialogue browser filters on, and a profile's identity;
- pages.py: what each page shows, as JSON (run curves and verdict from sead_ray.evaluation.report, the curriculum
  map, dialogue summaries and filters, comparison tables with their paired wins and losses);
- talk.py: the talk page's agents (a run's latest checkpoint on a local vLLM engine, `openai:MODEL@URL`,
  `script:CLASS`) and a conversation saved as a dialogue record;
- app.py: the Starlette app and `cmd_view`; static/: the page (plain HTML, CSS and JS, no build step).
"""
