"""What a person reads, from results files only: the fact sheet (Markdown and HTML), plots, the reports index."""
