"""Chapter 7 checks: byte-pair encoding, BERT's masking, GPT's next-token loss, sampling, block and KV cache.

One module per topic: :mod:`.tokenizer` (``bpe_train``, ``bpe_encode``), :mod:`.bert_masking`
(``mask_tokens``), :mod:`.gpt_training` (``causal_lm_loss``, ``GPTBlock``) and
:mod:`.gpt_generation` (``sample_next``, ``generate_with_cache``); their oracles live in
:mod:`autograder.oracles` (``bpe``, ``sampling``, ``gpt``).

Oracles: a plain implementation of the BPE rules (one scan per round that records
each pair's count and first position, then a sort), with variants that follow the rules known
mistakes follow; ``F.cross_entropy(ignore_index=pad_id)`` on tensors shifted here; and, for the
functions that draw at random, the probabilities the rules give, computed token by token in
float64, against which the learner's draws over many seeded rows must stay within a 5-sigma
binomial bound (``draws.SIGMAS``; plus ``draws.SLACK`` draws for tokens whose expected count is tiny). With
these bounds a right implementation fails a case with a probability below one in a million; the
mistakes the messages name are off by tens of sigmas.

``GPTBlock`` is compared, in float64, with ``nn.TransformerEncoderLayer(norm_first=True)`` holding
the case's weights under a causal mask; chapter 4's LayerNorm and ``nn.LayerNorm`` compute the same
function (biased variance, eps inside the square root), so no extra tolerance is needed. A
functional twin (:func:`autograder.oracles.gpt.gpt_block`), held to PyTorch on every eval case, names the mistakes and
replays the learner's dropout masks in training mode. ``generate_with_cache`` drives
:class:`autograder.toys.ToyGPT` (``Provided("toy_gpt", ...)``), whose forward uses PyTorch's own
causal attention; the oracle is that model read without a cache, step by step. The learner's copy
has a budget of positions per linear weight (prompt length + steps, per row), counted at ATen's
matrix products by :class:`harness.toys.Reads` from before the call, so that setting the model's
``budget`` or calling ``F.linear`` on its weights changes nothing; a read past it comes back as
``Recomputed``, which is how a decoder that reads the whole sequence again is caught. The count
runs in the learner's process and is advisory: a decoder that copies the weights first is not
seen, and nothing outside the process can tell a cache from reading everything again.

The cases hand the learner's function a ``torch.Generator`` as ``Provided("generator", {"seed": s})``:
each side builds its own from the seed. The judges draw nothing: torch's global generator is
never touched here.
"""
from __future__ import annotations

from .bert_masking import MaskTokensCheck
from .gpt_generation import GenerateWithCacheCheck, SampleNextCheck
from .gpt_training import CausalLmLossCheck, GPTBlockCheck
from .tokenizer import BpeEncodeCheck, BpeTrainCheck

CHECKS = [BpeTrainCheck, BpeEncodeCheck, MaskTokensCheck, CausalLmLossCheck, SampleNextCheck, GPTBlockCheck,
          GenerateWithCacheCheck]
