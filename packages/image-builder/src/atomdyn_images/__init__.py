"""Pinned ATOM + Dynamo images: rendering, building, the NIXL patch series and the in-image validator."""
