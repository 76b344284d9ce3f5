"""`roofline report`: charts and one self-contained HTML page (plus report.md and PNG/SVG files)
from bench and tune run folders, and the roofline chart of a ceiling analysis."""
