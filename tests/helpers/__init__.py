"""What several test modules share: devices, the measuring processes, fuzz cases, an issue-sweep smoke run
(docs/testing.md has the rules)."""
