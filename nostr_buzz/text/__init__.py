"""Text primitives every layer shares: Unicode classes and UTF-8 forms, the envelope's
escaping, the confusables table (docs/envelope.md).  Pure; imports nothing of the package but
its errors."""
