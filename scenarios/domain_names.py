"""Style domains of each multi-domain data source (no imports, so the schema can use it)."""
from __future__ import annotations

DOMAINS: dict[str, tuple[str, ...]] = {
    "digit_styles": ("original", "inverted", "blurred", "thick"),
    "digit_domains": ("mnist", "usps", "svhn"),
    "office_home": ("Art", "Clipart", "Product", "Real_World"),
    "adaptiope": ("product_images", "real_life", "synthetic"),
}
"""Data source (``dataset.name``) -> its domains, in the default order."""
