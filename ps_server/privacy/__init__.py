"""The PS half of site-level differential privacy: clip, noise, adaptive C and the ε accountant (`SitePrivacy`)."""

from .site_privacy import SitePrivacy

__all__ = ["SitePrivacy"]
