"""What the bot's records say to a person: the metrics report (text, HTML, charts), the
`buzz watch` view, the audit's verdicts, the manifest diff.  Pure: records in, text out
(docs/metrics.md, docs/cli.md)."""
