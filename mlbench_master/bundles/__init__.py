"""Result bundles: a run or a series leaves this installation as one signed file and enters
another read-only, with its origin (docs/publishing.rst).

- ``signing.py``: the installation's Ed25519 key, its public key and fingerprint;
- ``layout.py``: the file's format: member paths, what each run must carry, the limits;
- ``system.py``: a run's system description, in MLPerf's field names where they fit;
- ``writer.py``: export, streamed: members first, then the manifest and its signature;
- ``reader.py``: verification, before anything is written;
- ``importer.py``: storing a verified bundle's runs as imported, once;
- ``regrade.py``: this master's evaluator on an imported run's predictions;
- ``trust.py``: the keys this installation trusts, and how far an origin is trusted.
"""
