"""One module per NIP, named after its number."""
