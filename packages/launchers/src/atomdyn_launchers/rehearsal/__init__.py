"""The rehearsal: the local two-node cluster (the embedded default), the raw TCP copy the KV transfers are
measured against, the bench figures, and their invoke tasks."""
