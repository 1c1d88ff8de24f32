# %% [markdown]
# # 第 7 章练习：BERT 与 GPT
#
# 从 Transformer 中发展出了两个模型家族，它们各自只保留了它的一半。**BERT** 保留编码器：每个词元都能看到整个句子，左边右边都看得到；模型的预训练方式是把对它藏起来的词填回去。**GPT** 保留解码器，但去掉其中的交叉注意力：每个词元只能看到它前面的词元；模型的预训练方式是预测下一个词元，而这也正是它写文本的方式：一次写一个词元。两者读的文本都被切分成从数据中学到的**子词词元**。
#
# 你将编写模型周围的几个部件，它们决定模型学到什么、说出什么；然后编写 GPT 的基本模块，以及让它写作的代价变得负担得起的缓存：
#
# 1. `bpe_train`：从一段文本中学习字节对编码（BPE）的词表（即一系列合并规则）；
# 2. `bpe_encode`：用这些合并规则把一段新文本切分成词元；
# 3. `mask_tokens`：BERT 的掩码语言模型对一个批次所做的破坏，以及相应的标签；
# 4. `causal_lm_loss`：GPT 的下一词元损失，不计填充；
# 5. `sample_next`：用温度、top-k 和 top-p（核）采样抽取下一个词元；
# 6. `GPTBlock`：一个前归一化的仅解码器模块，用课程第 3 到第 5 章的部件搭建（`MultiHeadAttention`、`LayerNorm`、`PositionwiseFeedForward`，已在下方导入）；
# 7. `generate_with_cache`：贪婪生成，保留每个模块的键和值，使每一步只需读取一个新位置，而不必把整个序列再读一遍。
#
# 它们都不需要训练好的模型。每个函数都有一个供你写代码的单元格（替换掉 `raise NotImplementedError()`），紧随其后是一个测试单元格。运行测试单元格：如果你的函数正确，它会打印一行信息；否则它会告诉你哪里出了错、该去哪里查看。测试会把你的结果与每个定义的朴素实现相比较，与 PyTorch（`F.cross_entropy`、`nn.TransformerEncoderLayer`）相比较，与不使用缓存读取的模型相比较；对于随机抽取的函数，则在许多次设定了种子的抽取中，与规则给出的概率相比较。评分时还会用比这里看到的更多的用例来运行你的代码，所以请以写出正确的函数为目标，而不是只求通过测试。
#
# 要在终端中检查整个笔记本：`.venv/bin/python -m autograder check zh/exercises/ch07_bert_gpt/bert_gpt.ipynb`。
#
# **随机性。** `mask_tokens` 和 `sample_next` 会随机抽取，而且只能从传给它们的 `torch.Generator` 中抽取（`torch.rand(shape, generator=generator)`、`torch.randint(n, shape, generator=generator)`、`torch.multinomial(p, 1, generator=generator)`），绝不能从 PyTorch 的全局生成器中抽取（单独的 `torch.rand(shape)`）。这样，无论之前运行过什么，同一个种子总是给出同样的结果，测试也才能据此作出判断。

# %% tags=["export"]
from collections.abc import Sequence

import torch
from torch import nn

from reference.attention import scaled_dot_product_attention
from reference.decoder import subsequent_mask
from reference.encoder import LayerNorm, PositionwiseFeedForward
from reference.multihead import MultiHeadAttention, merge_heads, split_heads

# %% [markdown]
# ## 1. 学习子词词元：字节对编码
#
# 模型读取的是一个固定的词元词表。用整词做词元，词表会非常庞大，却仍然会漏掉新词；用单个字符做词元，序列会很长，而且要让模型自己去学拼写。**字节对编码**（BPE，Sennrich 等 2016 年提出，GPT-2 把它用在字节上）介于两者之间：从最小的单位出发，一次又一次地把最常一起出现的两个相邻单位粘合在一起。常见的词最终成为一个词元，罕见的词成为几段，而且永远不会出现未知的东西。
#
# 这里的单位是**字节**：文本的 UTF-8 编码 `list(text.encode("utf-8"))` 给出最初的词元，id 为 0 到 255（一个 `é` 是两个字节：`0xC3 0xA9`）。每次合并产生一个新词元，第 `k` 次合并（从 0 开始计数）得到的 id 是 `256 + k`。编写 `bpe_train(text, num_merges)`，返回合并规则：一个由 id 对组成的列表 `[(a, b), ...]`，按学到的先后顺序排列：
#
# 1. 从 `text` 的字节出发。
# 2. 统计每一对相邻的词元：对每个位置 `i` 取词元对 `(ids[i], ids[i + 1])`，因此在 `a a a` 中，词元对 `(a, a)` 出现了**两次**（位置 0 和位置 1）。
# 3. 取出现最频繁的词元对。如果有几对出现的次数相同，取**首次出现的位置最靠前**的那一对。（如果你用一个从左到右填充的 `dict` 来计数，`max(counts, key=counts.get)` 恰好就是这样做的：dict 会记住键被加入的顺序，而 `max` 在几个相等的最大值中保留第一个。）
# 4. 如果连这一对也只出现一次，就停止：合并它只会多出一个词元，却什么也省不下。剩下的词元少于两个时也停止。
# 5. 否则，**从左到右**把它的各处出现替换为新 id `256 + k`：在找到这一对的地方写入新 id，然后从这一对之后继续，因此在 `a a a` 中合并 `(a, a)` 得到的是 `aa a`，而不是 `a aa`。把这一对追加到合并规则列表中，然后回到第 2 步，直到完成 `num_merges` 次合并。
#
# 当 `num_merges` 为负数时，抛出 `ValueError`，其消息中要提到 `num_merges`。测试会在一些短文本（ASCII 文本、带重音符号的文本、重复性强的文本）以及一段 Python 自身的源代码上，把你的合并规则与这些规则的一个朴素实现相比较；一旦某次合并不同，它会指出是哪条规则不一致。
#
# 下面的辅助函数已经给出：`bpe_decode` 把 id 转换回文本，`bpe_vocabulary` 列出每个 id 所代表的字节。

# %% tags=["export"]
def bpe_vocabulary(merges: Sequence[tuple[int, int]]) -> dict[int, bytes]:
    """The bytes each id stands for: ids 0-255 are single bytes, id 256 + k the k-th merge's pair."""
    vocabulary = {i: bytes([i]) for i in range(256)}
    for k, (a, b) in enumerate(merges):
        vocabulary[256 + k] = vocabulary[a] + vocabulary[b]
    return vocabulary


def bpe_decode(ids: Sequence[int], merges: Sequence[tuple[int, int]]) -> str:
    """The text that a sequence of ids stands for (exactly, when the ids come from the same merges)."""
    vocabulary = bpe_vocabulary(merges)
    return b"".join(vocabulary[i] for i in ids).decode("utf-8", errors="replace")


# %% tags=["solution"] grade_id="bpe_train"
def bpe_train(text: str, num_merges: int) -> list[tuple[int, int]]:
    """Up to num_merges byte-pair merges learnt from text, in order; merge k makes the id 256 + k."""
    ### BEGIN SOLUTION
    if num_merges < 0:
        raise ValueError(f"num_merges must be at least 0, got {num_merges}")
    ids = list(text.encode("utf-8"))
    merges: list[tuple[int, int]] = []
    for k in range(num_merges):
        counts: dict[tuple[int, int], int] = {}
        for pair in zip(ids, ids[1:]):  # every neighbouring pair, overlapping ones included
            counts[pair] = counts.get(pair, 0) + 1
        if not counts:
            break
        best = max(counts, key=counts.get)  # ties: the pair seen first, since a dict keeps that order
        if counts[best] < 2:
            break
        new_id, merged, i = 256 + k, [], 0
        while i < len(ids):
            if i + 1 < len(ids) and (ids[i], ids[i + 1]) == best:
                merged.append(new_id)
                i += 2  # continue after the pair: occurrences never overlap
            else:
                merged.append(ids[i])
                i += 1
        ids = merged
        merges.append(best)
    return merges
    ### END SOLUTION


# %% tags=["test"] grade_id="test_bpe_train" points=3
from autograder import check

check("bert_gpt.bpe_train", bpe_train)
### BEGIN HIDDEN TESTS
check("bert_gpt.bpe_train", bpe_train, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# 在 Python 标准库的一段代码上训练之后，最先学到的那些合并粘合的是 Python 代码中重复得最多的东西：连串的空格（缩进，4 个和 8 个），然后是常见的字母对和词尾；后面的合并会构成更长的片段，比如文档字符串的 `"""`。

# %%
import inspect
import textwrap

corpus = inspect.getsource(textwrap)[:12000]
merges = bpe_train(corpus, 120)
vocabulary = bpe_vocabulary(merges)
print("the first 20 merges:", ", ".join(repr(vocabulary[256 + k].decode("utf-8", errors="replace")) for k in range(20)))
print("some later ones:    ", ", ".join(repr(vocabulary[256 + k].decode("utf-8", errors="replace")) for k in range(100, 120)))

# %% [markdown]
# ## 2. 编码一段新文本
#
# 合并规则就是分词器。要把任何文本切分成词元，就再次从它的字节出发，**按学到的先后顺序，一条接一条地**应用合并规则：先在整个序列中应用合并 0（从左到右，互不重叠，与训练时一样），再在整个序列中应用合并 1，依此类推。用在训练文本本身上，这会精确地重走一遍训练过程；用在新文本上，它会用上所有适用的合并，而没有被任何合并覆盖的字节则单独成为一个词元，所以任何文本都能被编码，哪怕其中有训练时从未见过的字符。
#
# 编写 `bpe_encode(text, merges)`，以 int 列表的形式返回 id。顺序很重要：使用合并规则 `[(b, c), (a, b)]` 时，文本 `abc` 会变成 `a` + `bc`（等轮到词元对 `(a, b)` 时，它已经不存在了）；而像 WordPiece 那样从左边开始取最长的已知片段，得到的则是 `ab` + `c`。测试会在含有和不含训练文本中的词的文本上，把你的 id 与它自己的编码器相比较，检查 `bpe_decode` 能否精确地还原你的文本，并检查对训练文本编码得到的词元数是否与训练结束时剩下的词元数相同。

# %% tags=["solution"] grade_id="bpe_encode"
def bpe_encode(text: str, merges: Sequence[tuple[int, int]]) -> list[int]:
    """The ids of text under the merges, applied in the order they were learnt."""
    ### BEGIN SOLUTION
    ids = list(text.encode("utf-8"))
    for k, (a, b) in enumerate(merges):
        new_id, merged, i = 256 + k, [], 0
        while i < len(ids):
            if i + 1 < len(ids) and ids[i] == a and ids[i + 1] == b:
                merged.append(new_id)
                i += 2
            else:
                merged.append(ids[i])
                i += 1
        ids = merged
    return ids
    ### END SOLUTION


# %% tags=["test"] grade_id="test_bpe_encode" points=2
check("bert_gpt.bpe_encode", bpe_encode)
### BEGIN HIDDEN TESTS
check("bert_gpt.bpe_encode", bpe_encode, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# 一行新代码被切分成语料库中常见的那些片段；显示时各词元之间用竖线隔开。编码是无损的：`bpe_decode` 精确地还原出原文本，而词元数远少于它的字节数。

# %%
line = "    def wrap_lines(self, text, width=70):  # naïve wrapping"
ids = bpe_encode(line, merges)
print("|".join(vocabulary[i].decode("utf-8", errors="replace") for i in ids))
print(f"{len(line.encode('utf-8'))} bytes -> {len(ids)} tokens; round trip exact: {bpe_decode(ids, merges) == line}")

# %% [markdown]
# ## 3. BERT：掩码语言模型
#
# 编码器能看到输入中的每个词元，所以“预测下一个词”根本算不上任务：答案就在输入里。BERT（Devlin 等，2019）改为藏起一些词元，训练编码器借助两侧的上下文把它们恢复出来。在一个序列的普通词元中，BERT **选出 15%**；损失只在被选中的位置上计算。一个被选中的词元
#
# * 以 0.8 的概率替换为 `[MASK]`，
# * 以 0.1 的概率替换为一个**随机的普通词元**，
# * 以 0.1 的概率**保持不变**。
#
# 为什么不总是用 `[MASK]`？因为之后在真实句子上微调模型时，`[MASK]` 这个词元从来不会出现。既然任何一个词元都可能暗中就是要预测的那个（可能被替换了，也可能就是它自己），模型就必须为每个位置都建立良好的表示，而不只是为 `[MASK]`。特殊词元（`[PAD]`、`[CLS]`、`[SEP]`、`[MASK]` 等）永远不会被选中：预测它们学不到任何东西。
#
# 编写 `mask_tokens(ids, mask_id, vocab_size, special_ids, generator, rate=0.15)`：
#
# * `ids`：形状为 `(B, T)` 的 `LongTensor`，词元 id 都小于 `vocab_size`；它**不能被修改**（写入之前先克隆）；
# * `special_ids`：特殊词元的 id，`mask_id` 也在其中；**普通** id 是 `range(vocab_size)` 中其余所有的 id；
# * 每个持有普通词元的位置，都以概率 `rate`（BERT 用的是 0.15）独立地被选中；特殊词元永远不选；
# * 对每个被选中的位置，用**一个**均匀分布的数 `u`（用 `torch.rand` 配合 `generator` 抽取）决定三种情况（0.8、0.1、0.1）中发生哪一种：`u < 0.8` 放入 `[MASK]`，`0.8 <= u < 0.9` 放入一个随机的普通 id，它从普通 id 中均匀抽取（可能碰巧就是原来的词元），其余的保留原来的词元；如果再做第二次抽取去覆盖一部分 `[MASK]`，各部分的比例就会改变；
# * 返回 `(inputs, labels)`，两者都是形状为 `(B, T)` 的 `LongTensor`：`inputs` 是做了替换之后的 `ids`；`labels` 在被选中的位置上存放原来的 id，在其他所有位置上存放 **-100**，这是 `F.cross_entropy` 默认忽略的值（`ignore_index=-100`）；
# * 一切都从 `generator` 中抽取；当 `rate` 不在 (0, 1] 中时，抛出 `ValueError`，其消息中要提到 `rate`。
#
# 测试会用设定了种子的生成器对很大的批次做掩码，并用 5-sigma 二项分布界（远超偶然所能产生的偏差）检查：普通词元中约有 `rate` 的比例被选中，被选中的词元按 80/10/10 划分，而且作为随机替换时每个普通 id 的可能性都相同。它还会精确地检查：特殊词元既不会被选中，也不会被抽中；未被选中的位置保持不变，标签为 -100；标签存放的是原来的 id；同一个种子给出同样的结果，换一个种子则给出另一个结果。

# %% tags=["solution"] grade_id="mask_tokens"
def mask_tokens(
    ids: torch.Tensor,
    mask_id: int,
    vocab_size: int,
    special_ids: Sequence[int],
    generator: torch.Generator,
    rate: float = 0.15,
) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT's masking of ids (B, T): (inputs, labels), labels -100 where no token was chosen."""
    ### BEGIN SOLUTION
    if not 0 < rate <= 1:
        raise ValueError(f"rate must be in (0, 1], got {rate}")
    special = set(special_ids)
    ordinary = torch.tensor([i for i in range(vocab_size) if i not in special], dtype=ids.dtype)  # (K,)
    is_special = torch.isin(ids, torch.tensor(sorted(special), dtype=ids.dtype))  # (B, T)
    chosen = (torch.rand(ids.shape, generator=generator) < rate) & ~is_special  # (B, T)
    what = torch.rand(ids.shape, generator=generator)  # (B, T): below 0.8 mask, below 0.9 random, else keep
    random_ids = ordinary[torch.randint(len(ordinary), ids.shape, generator=generator)]  # (B, T)
    inputs = ids.clone()
    inputs[chosen & (what < 0.8)] = mask_id
    replace = chosen & (what >= 0.8) & (what < 0.9)
    inputs[replace] = random_ids[replace]
    labels = torch.where(chosen, ids, torch.full_like(ids, -100))  # (B, T)
    return inputs, labels
    ### END SOLUTION


# %% tags=["test"] grade_id="test_mask_tokens" points=3
check("bert_gpt.mask_tokens", mask_tokens)
### BEGIN HIDDEN TESTS
check("bert_gpt.mask_tokens", mask_tokens, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# 一对句子，按 BERT 读取的样子排列，掩码比例提高到 0.4，好让你看到更多：开头是 `[CLS]`，每个句子之后是 `[SEP]`，末尾是填充。最后一行中的点表示该位置没有标签。

# %%
words = ["[PAD]", "[CLS]", "[SEP]", "[MASK]", "the", "model", "reads", "both", "sides", "of", "a", "word", "to", "fill",
         "in", "gap", "each"]
sentence = "[CLS] the model reads both sides of a word [SEP] each gap to fill in [SEP] [PAD] [PAD]".split()
ids = torch.tensor([[words.index(w) for w in sentence]])
inputs, labels = mask_tokens(ids, mask_id=3, vocab_size=len(words), special_ids=[0, 1, 2, 3],
                             generator=torch.Generator().manual_seed(4), rate=0.4)
width = max(map(len, words)) + 1
print("original:", "".join(w.ljust(width) for w in sentence))
print("input:   ", "".join(words[i].ljust(width) for i in inputs[0].tolist()))
print("label:   ", "".join((words[i] if i != -100 else ".").ljust(width) for i in labels[0].tolist()))

# %% [markdown]
# ## 4. GPT：下一词元损失
#
# 仅解码器模型通过因果自注意力（第 5 章的掩码）读取一个序列：位置 $t$ 的输出看到了词元 $x_1, \dots, x_t$，之后的什么也看不到。因此可以**在所有位置上同时**要求它预测下一个词元。设序列 $b$ 的位置 $t$ 上的 logits 为 $z_{b,t} \in \mathbb{R}^V$，损失就是在所有“下一个词元是真实词元”的位置上，对下一个词元的交叉熵取平均：
#
# $$\mathcal{L} = -\frac{1}{N} \sum_{(b,t)\,:\, x_{b,t+1} \ne \text{pad}}
#     \log \operatorname{softmax}(z_{b,t})_{x_{b,t+1}},$$
#
# 其中 $N$ 是整个批次中这类位置的个数（每个真实目标的权重都相同；长序列比短序列占的分量更重）。
#
# 编写 `causal_lm_loss(logits, ids, pad_id)`：
#
# * 形状为 `(B, T, V)` 的 `logits` 是模型对形状为 `(B, T)` 的输入 `ids` 的输出；
# * 位置 `t` 预测 `ids[:, t + 1]`：位置 `0 .. T-2` 的 logits 对应目标 `ids[:, 1:]`，最后一个位置的 logits 没有要预测的东西；
# * 序列在末尾用 `pad_id` 填充：等于 `pad_id` 的目标不计入求和，也不计入个数 $N$；当所有目标都是填充时，$N = 0$，结果为 NaN（0 / 0），与 `F.cross_entropy` 给出的一致；
# * 返回一个 0 维张量，dtype 与 `logits` 相同，并且梯度能够穿过它回传。
#
# 你可以使用 `F.cross_entropy`（借助它的 `ignore_index` 参数）或 `torch.log_softmax`；关键在于移位。测试会把你的损失与 `F.cross_entropy` 在它自己移位好的张量上算出的结果相比较。

# %% tags=["solution"] grade_id="causal_lm_loss"
def causal_lm_loss(logits: torch.Tensor, ids: torch.Tensor, pad_id: int) -> torch.Tensor:
    """Mean next-token cross-entropy: logits[:, t] (B, T, V) predict ids[:, t + 1]; padding ignored."""
    ### BEGIN SOLUTION
    predictions = logits[:, :-1]  # (B, T-1, V): the last position has no next token
    targets = ids[:, 1:]  # (B, T-1): the token each position must predict
    log_probs = torch.log_softmax(predictions, dim=-1)  # (B, T-1, V)
    nll = -log_probs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)  # (B, T-1)
    real = targets != pad_id  # (B, T-1)
    return nll[real].sum() / real.sum()
    ### END SOLUTION


# %% tags=["test"] grade_id="test_causal_lm_loss" points=2
check("bert_gpt.causal_lm_loss", causal_lm_loss)
### BEGIN HIDDEN TESTS
check("bert_gpt.causal_lm_loss", causal_lm_loss, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# 一个什么都不知道的模型会把概率平均地分给整个词表；这时无论是什么文本，它的损失都是 $\log V$。语言模型的训练就是从这里开始的。

# %%
import math

V = 500
uniform = torch.zeros(2, 12, V)
ids = torch.randint(1, V, (2, 12), generator=torch.Generator().manual_seed(0))
ids[1, 8:] = 0  # padding
print(f"loss of uniform logits: {causal_lm_loss(uniform, ids, pad_id=0).item():.4f};  log V = {math.log(V):.4f}")

# %% [markdown]
# ## 5. GPT：选择下一个词元
#
# 为了写作，GPT 模型计算下一个词元的 logits，抽取一个词元，把它接到末尾，然后重复。怎么抽取决定了文本的样子：总是选最可能的词元（贪婪解码）会不断重复；从完整的分布中抽取，则时不时会从长长的尾部抽到一个荒唐的词元。有三个旋钮，按以下顺序作用于每一行 logits $z$：
#
# 1. **温度** $\tau$：从 $\operatorname{softmax}(z / \tau)$ 中抽样。小于 1 时分布变得更尖锐，大于 1 时变得更平坦；$\tau = 0$ 表示贪婪，即取 logits 的 `argmax`。
# 2. **Top-k**（`top_k > 0`）：只保留 logits 最大的 `top_k` 个词元（当 `top_k` 不小于词表大小时保留全部；`top_k=0` 保留每个词元）。`top_k=1` 就是贪婪。
# 3. **Top-p**，即核（Holtzman 等，2020），`top_p` 在 (0, 1] 中：取仍被保留的词元的概率（在第 1、2 步之后重新归一化），从最可能的往下排序，保留概率之和至少达到 `top_p` 的**最小**的高概率词元集合。也就是说，当比某个词元更可能的那些词元的概率合计小于 `top_p` 时，这个词元就被保留，而最可能的词元总是被保留。`top_p=1` 保留每个词元。
#
# 然后在保留下来的词元上重新归一化，每行抽取一个词元。核能做到 top-k 做不到的自适应：在“the capital of France is”（法国的首都是）之后，一个词元就占了几乎全部概率，核就是这一个词元；在“my favourite food is”（我最喜欢的食物是）之后，核里有许多词元。
#
# 编写 `sample_next(logits, temperature=1.0, top_k=0, top_p=1.0, generator=None)`：`logits` 的形状为 `(B, V)`，返回形状为 `(B,)` 的 `LongTensor`，即第 `b` 行抽到的词元。贪婪选择（温度为 0，或 `top_k=1`）不做任何随机抽取。用 `torch.multinomial(probs, 1, generator=generator)` 抽取，使所有随机性都来自 `generator`；被 top-k 或 top-p 去掉的词元，其概率必须恰好为 0（在 softmax 之前把它的 logit 设为 `-inf`，或者把它的概率设为 0）。对于负的温度、负的 `top_k`，或不在 (0, 1] 中的 `top_p`，抛出 `ValueError`，其消息中要提到相应的参数。
#
# 测试会从几个分布中抽取许多行，检查 top-k 或核之外的词元从未被抽中，并检查每个保留下来的词元被抽中的频率与它重新归一化后的概率相符，误差在 5-sigma 二项分布界之内；贪婪选择必须完全精确。

# %% tags=["solution"] grade_id="sample_next"
def sample_next(
    logits: torch.Tensor,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """One token per row of logits (B, V), shape (B,): temperature, then top-k, then top-p, then a draw."""
    ### BEGIN SOLUTION
    if temperature < 0:
        raise ValueError(f"temperature must be at least 0 (0 is greedy), got {temperature}")
    if top_k < 0:
        raise ValueError(f"top_k must be at least 0 (0 keeps every token), got {top_k}")
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}")
    if temperature == 0 or top_k == 1:
        return logits.argmax(dim=-1)  # (B,)
    scores = logits.double() / temperature  # (B, V)
    if 0 < top_k < scores.shape[-1]:
        kth = scores.topk(top_k, dim=-1).values[:, -1:]  # (B, 1): the k-th largest score of each row
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if top_p < 1:
        probs, order = torch.softmax(scores, dim=-1).sort(dim=-1, descending=True)  # (B, V) each
        ahead = probs.cumsum(dim=-1) - probs  # (B, V): the mass of the tokens more likely than each
        drop_sorted = ahead >= top_p  # the most likely token has 0 ahead of it: always kept
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)  # (B, V), vocabulary order
        scores = scores.masked_fill(drop, float("-inf"))
    probs = torch.softmax(scores, dim=-1)  # (B, V), zero where a token was removed
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)  # (B,)
    ### END SOLUTION


# %% tags=["test"] grade_id="test_sample_next" points=3
check("bert_gpt.sample_next", sample_next)
### BEGIN HIDDEN TESTS
check("bert_gpt.sample_next", sample_next, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# 从同一行 logits 中抽取 20,000 次时每个词元被抽中的频率：温度会重塑整个分布，top-k 和 top-p 则截掉它的尾部。

# %%
import matplotlib.pyplot as plt

row = torch.tensor([[3.0, 2.4, 2.0, 1.2, 1.0, 0.5, 0.1, -0.5, -1.0, -2.0]])
settings = [("temperature 1", {}), ("temperature 0.5", {"temperature": 0.5}), ("temperature 2", {"temperature": 2.0}),
            ("top_k 3", {"top_k": 3}), ("top_p 0.8", {"top_p": 0.8})]
fig, axes = plt.subplots(1, len(settings), figsize=(12, 2.6), sharey=True)
for ax, (title, kwargs) in zip(axes, settings):
    drawn = sample_next(row.expand(20000, -1), generator=torch.Generator().manual_seed(0), **kwargs)
    ax.bar(range(row.shape[1]), torch.bincount(drawn, minlength=row.shape[1]) / 20000)
    ax.set(title=title, xlabel="token")
axes[0].set(ylabel="share of draws")
plt.tight_layout()
plt.show()

# %% [markdown]
# 世上最小的语言模型——一张表，记录每个词元跟在另一个词元之后的频次（二元语法模型，bigram model），在语料库的 BPE 词元上统计而成——借助 `sample_next` 来写“Python”。贪婪解码很快就会陷入循环；抽样则会四处游荡，温度较低并使用核时游荡得少一些。

# %%
tokens = torch.tensor(bpe_encode(corpus, merges))
V = 256 + len(merges)
counts = torch.zeros(V, V)
counts.index_put_((tokens[:-1], tokens[1:]), torch.ones(len(tokens) - 1), accumulate=True)
bigram_logits = torch.log(counts + 1e-3)  # (V, V): row a, the logits of the token after a


def generate(start: str, steps: int, **kwargs) -> str:
    ids = bpe_encode(start, merges)
    g = torch.Generator().manual_seed(1)
    for _ in range(steps):
        ids.append(int(sample_next(bigram_logits[ids[-1]].unsqueeze(0), generator=g, **kwargs)))
    return bpe_decode(ids, merges)


for kwargs in ({"temperature": 0}, {"temperature": 1.0}, {"temperature": 0.7, "top_p": 0.9}):
    print(f"--- {kwargs}\n{generate('def ', 40, **kwargs)}\n")


# %% [markdown]
# ## 6. GPT 的模块：前归一化、因果自注意力
#
# GPT 模型是由一模一样的模块堆叠而成的，每个模块就是第 5 章的解码器层去掉交叉注意力（没有编码器可看）。剩下两个子层：因果多头自注意力和逐位置前馈网络。GPT-2（Radford 等，2019）还挪动了层归一化（LayerNorm）的位置。论文以及你的 `EncoderLayer` 和 `DecoderLayer` 归一化的是残差之和（**后归一化**）；GPT-2 归一化的是每个子层的输入，残差路径则原封不动（**前归一化**）：
#
# $$\text{post-norm (chapter 4):}\quad x \leftarrow \operatorname{LayerNorm}\big(x + \operatorname{Sublayer}(x)\big)
# \qquad\qquad
# \text{pre-norm (GPT-2):}\quad x \leftarrow x + \operatorname{Sublayer}\big(\operatorname{LayerNorm}(x)\big)$$
#
# 采用前归一化时，第一个模块的输入只经过一串加法就到达最后一个模块的输出，梯度也是如此，无论堆叠有多深；这样的堆叠无需后归一化所需要的那种精心安排的学习率预热就能训练。代价是：从最后一个模块流出的数据从未被归一化过，所以模型在堆叠之后再加一个最终的层归一化（下面的 `GPT` 类就是这样做的）。
#
# 编写 `GPTBlock(d_model, h, d_ff, dropout=0.1)`，包含以下子模块，按使用的先后顺序排列：
#
# * `norm1`：第 4 章的 `LayerNorm(d_model)`，作用于注意力的输入；
# * `self_attn`：第 3 章的 `MultiHeadAttention(d_model, h, dropout)`；
# * `dropout1`：`nn.Dropout(dropout)`，在注意力的输出加到 `x` 上之前，对它做随机失活（dropout）；
# * `norm2`：第二个 `LayerNorm(d_model)`，有自己的 $\gamma$ 和 $\beta$，作用于前馈网络的输入；
# * `feed_forward`：第 4 章的 `PositionwiseFeedForward(d_model, d_ff, dropout)`；
# * `dropout2`：`nn.Dropout(dropout)`，在前馈网络的输出加到 `x` 上之前，对它做 dropout。
#
# `forward(x)` 接收形状为 `(B, T, d_model)` 的 `x`，返回同样形状的结果。模块自己生成因果掩码（第 5 章的 `subsequent_mask(T)`，在查询可以关注的地方为 True）：GPT 模块总是因果的，所以位置 $t$ 的输出只依赖于位置 $0..t$。在评估模式下（`block.eval()`），dropout 关闭，模块是确定性的。
#
# 测试会按这些名字把固定的权重加载到你的模块中，并在因果掩码下，把它与持有相同权重的 PyTorch `nn.TransformerEncoderLayer(norm_first=True)` 相比较。第 4 章的 `LayerNorm` 和 `nn.LayerNorm` 计算的是同一个函数（有偏方差，$\epsilon$ 位于平方根之内），所以两者在舍入误差范围内一致。测试还会改变未来的词元，检查之前的输出没有任何变动，并在训练模式下重放你的模块的 dropout。不要在你的答案中使用 `nn.TransformerEncoderLayer`、`nn.TransformerDecoderLayer` 或 `nn.MultiheadAttention`：检查你的模块时，正是拿它们来对照的。

# %% tags=["solution"] grade_id="GPTBlock"
class GPTBlock(nn.Module):
    """One GPT block (pre-norm): x + Dropout(Attention(LayerNorm(x))) under a causal mask, then x + Dropout(FFN(LayerNorm(x))).

    Submodules: ``norm1``, ``self_attn``, ``dropout1``, ``norm2``, ``feed_forward``, ``dropout2``.
    """

    def __init__(self, d_model: int, h: int, d_ff: int, dropout: float = 0.1) -> None:
        super().__init__()
        ### BEGIN SOLUTION
        self.norm1 = LayerNorm(d_model)
        self.self_attn = MultiHeadAttention(d_model, h, dropout)
        self.dropout1 = nn.Dropout(dropout)
        # Its own gamma and beta: the feed-forward network's input is not the attention's.
        self.norm2 = LayerNorm(d_model)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, dropout)
        self.dropout2 = nn.Dropout(dropout)
        ### END SOLUTION

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, d_model) -> (B, T, d_model); position t sees positions 0..t only."""
        ### BEGIN SOLUTION
        mask = subsequent_mask(x.shape[1]).to(x.device)  # (T, T), True where a query may attend
        normed = self.norm1(x)  # (B, T, d_model)
        # Pre-norm: the sub-layer reads a normalised copy; the residual path carries x itself.
        x = x + self.dropout1(self.self_attn(normed, normed, normed, attn_mask=mask))  # (B, T, d_model)
        return x + self.dropout2(self.feed_forward(self.norm2(x)))  # (B, T, d_model)
        ### END SOLUTION


# %% tags=["test"] grade_id="test_GPTBlock" points=4
check("bert_gpt.GPTBlock", GPTBlock)
### BEGIN HIDDEN TESTS
check("bert_gpt.GPTBlock", GPTBlock, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# 实测因果承诺：改变最后两个词元，前面那些位置的输出丝毫不动。

# %%
torch.manual_seed(0)
block = GPTBlock(d_model=16, h=4, d_ff=32).eval()
x = torch.randn(1, 6, 16)  # (B, T, d_model)
x_new = x.clone()
x_new[:, 4:] = torch.randn(1, 2, 16)  # new tokens at positions 4 and 5
with torch.no_grad():
    change = (block(x) - block(x_new)).abs().amax(dim=-1)  # (B, T): the largest change at each position
print("largest change per position:", change[0])

# %% [markdown]
# ## 7. 快速写作：键值缓存
#
# 整个模型已经给出：词元嵌入加上**学习得到的**位置嵌入（GPT 和 BERT 一样，为每个位置学习一个向量，而不是使用第 6 章的正弦函数），一个由你的 `GPTBlock` 组成的堆叠，一个最终的层归一化，以及一个输出层，它的权重矩阵**就是**词元嵌入的那个矩阵（权重共享，与论文第 3.4 节一样：同一个矩阵既读取词元，也写出词元）。

# %% tags=["export"]
class GPT(nn.Module):
    """A decoder-only language model: embeddings, N GPTBlocks, a final LayerNorm and a tied output layer.

    Submodules: ``embed`` (vocab_size x d_model), ``pos_embed`` (max_len x d_model), ``dropout``,
    ``blocks`` (N ``GPTBlock``), ``norm`` and ``head`` (d_model -> vocab_size, no bias, its weight
    that of ``embed``).
    """

    def __init__(self, vocab_size: int, d_model: int = 64, h: int = 4, d_ff: int = 256, N: int = 2,
                 max_len: int = 256, dropout: float = 0.1) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_model)
        self.pos_embed = nn.Embedding(max_len, d_model)
        self.dropout = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(GPTBlock(d_model, h, d_ff, dropout) for _ in range(N))
        self.norm = LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size, bias=False)
        self.head.weight = self.embed.weight  # weight tying: one (vocab_size, d_model) matrix
        self.max_len = max_len

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """ids (B, T) -> next-token logits (B, T, vocab_size), reading the whole sequence at once."""
        T = ids.shape[1]
        if T > self.max_len:
            raise ValueError(f"a sequence of {T} tokens is longer than max_len={self.max_len}")
        x = self.dropout(self.embed(ids) + self.pos_embed(torch.arange(T, device=ids.device)))  # (B, T, d_model)
        for block in self.blocks:
            x = block(x)  # (B, T, d_model)
        return self.head(self.norm(x))  # (B, T, vocab_size)


# %% [markdown]
# 要写出 $n$ 个词元，朴素的做法是在一个越来越长的序列上调用 `model(ids)` $n$ 次，只保留最后一个位置的 logits：第 $s$ 步要把全部 $T_0 + s$ 个位置重新读一遍，尽管除了最新的那个之外，其余位置在上一步都已读过，结果也完全相同。它们之所以从不改变，是因为因果掩码：位置 $t$ 看不到它之后的任何东西，所以一旦位置 $t$ 上的词元确定，它在每个模块中的键和值就固定了。把它们保留下来，每一步就只需要算出最新的那个位置：
#
# * 它在每个模块中的查询、键和值，只由这一个位置算出；
# * 它对到目前为止**所有**键和值的注意力：缓存下来的那些，再加上它自己的；
# * 前馈网络、最终的层归一化和输出层，只作用于这一个位置。
#
# 这就是**键值缓存**（KV 缓存）。它把每一步的工作量从整个序列变为一个位置，也正是因为它，聊天模型才能以阅读的速度作答。
#
# 编写 `generate_with_cache(model, prompt, steps)`，实现带缓存的贪婪解码（每一步取最可能的词元）：
#
# * `model` 的结构与上面的 `GPT` 相同：`model.embed`、`model.pos_embed`、`model.blocks`（每个模块都有 `norm1`、`self_attn`、`norm2`、`feed_forward`）、`model.norm` 和 `model.head`。请你自己使用这些部件（不要调用 `model(...)` 或模块的 `forward`，它们会读取整个序列）：`block.self_attn.w_q`、`w_k`、`w_v`、`w_o` 是它的投影，`block.self_attn.h` 是它的头数；`split_heads`、`merge_heads`（第 3 章）、`scaled_dot_product_attention`（第 2 章）和 `subsequent_mask`（第 5 章）都已导入。模型处于评估模式：dropout 不起任何作用，也不需要调用 `block.dropout1`。
# * `prompt` 是形状为 `(B, T0)` 的 `LongTensor`，即提示（prompt），每一行长度相同；第一步一次读入整个提示（与模块中一样使用因果掩码：提示中的各个位置不能看到彼此的未来），之后的每一步读入上一步生成的那一个词元，放在它在序列中的位置上（第一个生成的词元位于位置 `T0`）。当一次读入从位置 `start` 开始的 `T_new` 个位置时，查询 `t`（位于位置 `start + t`）可以看到键 `0 .. start + t`：这个掩码就是完整因果掩码的最后 `T_new` 行，即 `subsequent_mask(start + T_new)[start:]`，形状为 `(T_new, start + T_new)`。
# * 返回 `(tokens, logits, cache)`：`tokens` 的形状为 `(B, steps)`，是生成的 id；`logits` 的形状为 `(B, steps, V)`，是第 `s` 步的 logits，第 `s` 个词元就是从它选出的（在词表上取 argmax）；`cache` 是一个列表，每个模块一个 `(k, v)` 对，每个的形状都是 `(B, h, T0 + steps - 1, d_k)`：所有读过的位置的键和值。最后一个词元会被返回，但从未被读取，所以它还没有键。
# * 当 `steps` 小于 1 时，抛出 `ValueError`，其消息中要提到 `steps`。
#
# 测试会在一行和多行的批次上，把你每一步的 logits、你的词元和你的缓存，与同一个模型不用缓存读取的结果相比较，并统计模型每一层读取的位置数：如果每一步都把整个序列重读一遍，就会被拒绝，并给出一条说明消息。

# %% tags=["solution"] grade_id="generate_with_cache"
def generate_with_cache(
    model: nn.Module, prompt: torch.Tensor, steps: int
) -> tuple[torch.Tensor, torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
    """Greedy decoding of steps tokens after prompt (B, T0), each position read once: (tokens, logits, cache)."""
    ### BEGIN SOLUTION
    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    cache: list[tuple[torch.Tensor, torch.Tensor]] = []
    new = prompt  # (B, T_new): the positions not read yet, the whole prompt at first
    start = 0  # the position of new[:, 0] in the sequence
    tokens, logits = [], []
    with torch.no_grad():
        for _ in range(steps):
            T_new = new.shape[1]
            x = model.embed(new) + model.pos_embed(torch.arange(start, start + T_new, device=new.device))  # (B, T_new, d_model)
            # New query t sits at position start + t and may see the keys 0 .. start + t.
            mask = subsequent_mask(start + T_new)[start:].to(new.device)  # (T_new, start + T_new)
            for i, block in enumerate(model.blocks):
                attn = block.self_attn
                normed = block.norm1(x)  # (B, T_new, d_model)
                q = split_heads(attn.w_q(normed), attn.h)  # (B, h, T_new, d_k)
                k = split_heads(attn.w_k(normed), attn.h)  # (B, h, T_new, d_k)
                v = split_heads(attn.w_v(normed), attn.h)  # (B, h, T_new, d_k)
                if i < len(cache):
                    k = torch.cat([cache[i][0], k], dim=2)  # (B, h, start + T_new, d_k)
                    v = torch.cat([cache[i][1], v], dim=2)  # (B, h, start + T_new, d_k)
                    cache[i] = (k, v)
                else:
                    cache.append((k, v))
                context, _ = scaled_dot_product_attention(q, k, v, mask)  # (B, h, T_new, d_k)
                x = x + attn.w_o(merge_heads(context))  # (B, T_new, d_model)
                x = x + block.feed_forward(block.norm2(x))  # (B, T_new, d_model)
            step_logits = model.head(model.norm(x[:, -1]))  # (B, V): only the newest position predicts
            next_token = step_logits.argmax(dim=-1)  # (B,)
            tokens.append(next_token)
            logits.append(step_logits)
            start += T_new
            new = next_token.unsqueeze(1)  # (B, 1)
    return torch.stack(tokens, dim=1), torch.stack(logits, dim=1), cache
    ### END SOLUTION


# %% tags=["test"] grade_id="test_generate_with_cache" points=4
check("bert_gpt.generate_with_cache", generate_with_cache)
### BEGIN HIDDEN TESTS
check("bert_gpt.generate_with_cache", generate_with_cache, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# 有了你的缓存，一个由你的模块组成的（未经训练的）`GPT` 写出的词元，与每一步都重读整个序列时写出的相同，logits 也在舍入误差范围内一致；两种做法各自的耗时都会打印出来。本章的网页在几种长度上测量了加速比。

# %%
import time


def generate_without_cache(model: nn.Module, prompt: torch.Tensor, steps: int) -> tuple[torch.Tensor, torch.Tensor]:
    ids, all_logits = prompt, []
    with torch.no_grad():
        for _ in range(steps):
            step_logits = model(ids)[:, -1]  # (B, V): the whole sequence read again
            all_logits.append(step_logits)
            ids = torch.cat([ids, step_logits.argmax(dim=-1, keepdim=True)], dim=1)
    return ids[:, prompt.shape[1]:], torch.stack(all_logits, dim=1)


torch.manual_seed(0)
gpt = GPT(vocab_size=100, d_model=64, h=4, d_ff=256, N=4, max_len=256).eval()
prompt = torch.randint(0, 100, (2, 16))
began = time.perf_counter()
plain_tokens, plain_logits = generate_without_cache(gpt, prompt, 120)
plain_time = time.perf_counter() - began
began = time.perf_counter()
cached_tokens, cached_logits, cache = generate_with_cache(gpt, prompt, 120)
cached_time = time.perf_counter() - began
difference = (plain_logits - cached_logits).abs().max().item()
same = torch.equal(plain_tokens, cached_tokens) and difference < 1e-4  # float32 rounding stays far below 1e-4
print("same tokens:", torch.equal(plain_tokens, cached_tokens), f"| largest logit difference: {difference:.1e}")
print("the cache agrees with reading the whole sequence" if same else
      "WRONG: with a cache the logits differ from reading the whole sequence (rounding stays below 1e-4): "
      "your GPTBlock or your generate_with_cache is wrong; their test cells above say which and how")
print("cache of block 0:", tuple(cache[0][0].shape), "= (B, h, T0 + steps - 1, d_k)")
print(f"without a cache {plain_time:.2f} s, with one {cached_time:.2f} s")
