"""Edges of position_encodings.py found by the mutation check: exact values written out from the papers' formulas.

Each test states the expected numbers by hand (or with a plain loop over the formula), so an edit of the code that
changes any of them fails here. fp32; exact or 1e-6.
"""

import torch

from roformer_ext.position_encodings import alibi_slopes


def test_alibi_slopes_of_six_heads_are_the_four_head_slopes_then_every_other_of_eight():
    # Press et al.: 2^(-8i/4) for i = 1..4, then 2^(-8i/8) for i = 1, 3 (the odd ones of eight heads)
    assert alibi_slopes(6).tolist() == [2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8, 2.0**-1, 2.0**-3]
