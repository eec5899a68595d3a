"""The matplotlib style every hetsim figure shares (figures.py, replay.py): sizes, spines, fonts embedded as
TrueType in PDFs, 150 dpi."""

STYLE = {
    "font.size": 10,
    "axes.titlesize": 11,
    "figure.titlesize": 11,
    "axes.labelsize": 10,
    "xtick.labelsize": 9,
    "ytick.labelsize": 9,
    "legend.fontsize": 9,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.linewidth": 0.8,
    "axes.axisbelow": True,
    "axes.grid": False,
    "hatch.linewidth": 0.6,
    "legend.frameon": False,
    "pdf.fonttype": 42,
    "ps.fonttype": 42,
    "savefig.dpi": 150,
    "figure.dpi": 150,
}

# Figure files carry no creation time, so the same inputs give the same bytes (PDF: CreationDate; PNG: the
# Software key is fixed too).
PDF_METADATA = {"CreationDate": None, "Producer": "hetsim"}
PNG_METADATA = {"Software": "hetsim"}


def save(fig, path, dpi=150):
    """Saves a PNG or PDF (by the path's extension) reproducibly."""
    if path.lower().endswith(".pdf"):
        fig.savefig(path, metadata=PDF_METADATA)
    else:
        fig.savefig(path, dpi=dpi, metadata=PNG_METADATA)
