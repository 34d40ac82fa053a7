"""The offline auditor: replay view logs, account pairwise privacy loss, attack, report."""
