"""Candidate lines of a random program: the Program mixin that proposes each
next line (single ops, the forms that alias memory, multi-line snippets),
before Program runs it on CPU and keeps it or not."""

import torch

from lazy_bounds import _extreme
from lazy_tables import BINARY_FNS, BINARY_OPS, DTYPES, EXTREME_SCALARS, INPLACE, UNARY_ANY, UNARY_FLOAT
from lazy_tracking import _same_storage

# (cumulative probability, template) for reductions over one dim.
REDUCTIONS = [
    (0.15, "{out} = {a}.amax(dim={dim}, keepdim={keep})"),
    (0.25, "{out} = {a}.argmax(dim={dim}, keepdim={keep})"),
    (0.35, "{out} = {a}.any(dim={dim}, keepdim={keep})"),
    (0.5, "{out} = torch.softmax({a}, dim={dim})"),
    (0.6, "{out} = torch.log_softmax({a}, dim={dim})"),
    (0.7, "{out} = {a}.var(dim={dim}, keepdim={keep})"),
    (0.8, "{out} = torch.logsumexp({a}, dim={dim}, keepdim={keep})"),
    (0.9, "{out} = {a}.sum(dim={dim}, keepdim={keep})"),
    (1.0, "{out} = {a}.max(dim={dim}, keepdim={keep}).values"),
]


def _pick(table, u):
    return next(template for bound, template in table if u < bound)


# Probability that a candidate starts a multi-line sequence (a snippet).
SNIPPET = 0.1


def _has_extremes(t):
    if not t.dtype.is_floating_point or t.numel() == 0:
        return False
    v = t.double()
    return bool((_extreme(v) | ((v == 0) & torch.signbit(v))).any())


class _Candidates:
    """Proposes lines: each method returns (line, the new name or None), or
    (None, None) for nothing. Program holds the state they read: names,
    lines, group, inputs, and the current line's _form, _error_keep and
    _extreme_scalar, and the running snippet (_snippet, _last)."""

    def _name(self):
        return f"v{len(self.lines)}"

    def _next(self, rng, env):
        if self._snippet is not None:
            try:
                return self._snippet.send(self._last)
            except StopIteration:
                self._snippet = None
        if not self.names:
            return None, None
        if rng.random() < SNIPPET:
            make = rng.choice([self._snippet_read_then_expanded_write, self._snippet_write_view_read_other])
            self._snippet = make(rng, env)
            try:
                return next(self._snippet)
            except StopIteration:
                self._snippet = None
                return None, None
        return self._candidate(rng, env)

    def _scalar(self, rng, extreme=0.25):
        if rng.random() < extreme:
            self._extreme_scalar = True
            return rng.choice(EXTREME_SCALARS)
        kind = rng.random()
        if kind < 0.5:
            return repr(round(rng.uniform(-3, 3), 3))
        if kind < 0.9:
            return str(rng.randint(-3, 3))
        return rng.choice(["True", "False"])

    def _unary(self, rng, a):
        return f"{self._name()} = torch.{rng.choice(UNARY_FLOAT + UNARY_ANY)}({a})", self._name()

    def _binary(self, rng, a, b):
        out = self._name()
        op = rng.choice(BINARY_OPS)
        rhs = b if rng.random() < 0.7 else self._scalar(rng)
        return (f"{out} = {a} {op} {rhs}" if rng.random() < 0.8 else f"{out} = {rhs} {op} {a}"), out

    def _cast(self, rng, a):
        dt = rng.choice(DTYPES)
        return f"{self._name()} = {a}.to(torch.{str(dt).split('.')[-1]})", self._name()

    def _reduction(self, rng, env, a):
        out = self._name()
        ta = env[a]
        dim = rng.randrange(-ta.dim(), ta.dim()) if ta.dim() else None
        keep = rng.choice([True, False])
        if dim is None:
            return f"{out} = {a}.amax()", out
        return _pick(REDUCTIONS, rng.random()).format(out=out, a=a, dim=dim, keep=keep), out

    def _read(self, rng, env, a):
        """A line that reads `a` into a new value."""
        names = self.names
        u = rng.random()
        if u < 0.3:
            return self._unary(rng, a)
        if u < 0.5:
            return self._binary(rng, a, rng.choice(names))
        if u < 0.6:
            return self._cast(rng, a)
        if u < 0.68:
            return f"{self._name()} = {a}.clone()", self._name()
        return self._reduction(rng, env, a)

    def _in_place(self, rng, dst, src, op=None):
        """An in-place op writing `dst` (an expression) from `src`."""
        op = op or rng.choice(INPLACE + ["copy_", "copy_"])
        if op == "maximum":
            return f"torch.maximum({dst}, {src}, out={dst})", None
        if op == "lerp_":
            return f"{dst}.lerp_({src}, {round(rng.uniform(0, 1), 2)})", None
        return f"{dst}.{op}({src})", None

    def _aliases(self, env, a):
        """Other live names that view `a`'s buffer."""
        return [
            n for n in self.names if n != a and self.group.get(n) == self.group.get(a) and _same_storage(env[n], env[a])
        ]

    def _overlapping_in_place(self, rng, env):
        """In place, with an input that overlaps (fully or partly) the written tensor."""
        self._form = "overlapping in-place"
        self._error_keep = 0.9
        names = [n for n in self.names if env[n].dim() >= 1 and env[n].numel() > 0]
        if not names:
            return None, None
        a = rng.choice(names)
        ta = env[a]
        d = rng.randrange(ta.dim())
        n = ta.shape[d]
        form = rng.random()
        dst = a
        if form < 0.25 and ta.dim() >= 2:  # a.add_(a.t()): partly overlapping input
            src = f"{a}.t()" if ta.dim() == 2 and rng.random() < 0.5 else f"{a}.transpose(-1, -2)"
        elif form < 0.5 and n > 1:  # a[1:].copy_(a[:-1]): shifted views of one buffer
            if d == 0 and rng.random() < 0.5:
                dst, src = f"{a}[1:]", f"{a}[:-1]"
            else:
                dst, src = f"{a}.narrow({d}, 1, {n - 1})", f"{a}.narrow({d}, 0, {n - 1})"
            if rng.random() < 0.3:
                dst, src = src, dst
        elif form < 0.65:  # a.mul_(a[..., :1]): a slice of itself, broadcast
            k = rng.randrange(n)
            src = f"{a}.narrow({d}, {k}, 1)" if rng.random() < 0.6 else f"{a}.select({d}, {k})"
        elif form < 0.75:  # the same elements
            src = rng.choice([a, f"{a}.unsqueeze(0).expand(2, *{a}.shape)[1]"])
        else:  # through another name for a view of the same buffer
            others = self._aliases(env, a)
            if not others:
                return None, None
            src = rng.choice(others)
            if rng.random() < 0.4:
                dst, src = src, a
        return self._in_place(rng, dst, src, op=rng.choice(INPLACE + ["copy_", "copy_", "add_"]))

    def _expanded(self, rng, env, a):
        """An expanded view of `a` (more than one element per memory location)."""
        ta = env[a]
        ones = [i for i, s in enumerate(ta.shape) if s == 1]
        if ones and rng.random() < 0.4:
            sizes = [3 if s == 1 else s for s in ta.shape]
            return f"{a}.expand({', '.join(map(str, sizes))})"
        return f"{a}.unsqueeze(0).expand({rng.choice([2, 3])}, *{a}.shape)"

    def _expanded_write(self, rng, env):
        """A write through an expanded view: fill_/zero_ (eager allows), others (eager refuses)."""
        self._form = "write through an expanded view"
        self._error_keep = 0.7
        expanded = [n for n in self.names if any(st == 0 and sz > 1 for st, sz in zip(env[n].stride(), env[n].shape))]
        dst = (
            rng.choice(expanded)
            if expanded and rng.random() < 0.6
            else self._expanded(rng, env, rng.choice(self.names))
        )
        u = rng.random()
        if u < 0.4:
            return f"{dst}.fill_({self._scalar(rng)})", None
        if u < 0.7:
            return f"{dst}.zero_()", None
        src = rng.choice(self.names) if rng.random() < 0.7 else self._scalar(rng)
        return self._in_place(rng, dst, src)

    def _snippet_read_then_expanded_write(self, rng, env):
        """e = expand(a); reads of e or a; e.fill_/zero_; maybe reads after.
        The reads made before the write must see the old values."""
        a = rng.choice(self.names)
        self._form = "expanded view"
        e = yield (f"{self._name()} = {self._expanded(rng, env, a)}", self._name())
        if e is None or e is True:
            return
        for _ in range(rng.choice([1, 1, 2])):
            self._form = "read before a write through an expanded view"
            yield self._read(rng, env, rng.choice([e, e, a]))
        self._form = "write through an expanded view"
        self._error_keep = 0.7
        if rng.random() < 0.85:
            yield (f"{e}.fill_({self._scalar(rng)})" if rng.random() < 0.5 else f"{e}.zero_()"), None
        else:
            yield self._in_place(rng, e, rng.choice(self.names))
        if rng.random() < 0.5 and a in self.names:
            self._form = "read after a write through an expanded view"
            yield self._read(rng, env, rng.choice([a, e] if e in self.names else [a]))

    def _view_source(self, rng, env, a):
        ta = env[a]
        if ta.dim() == 0:
            return f"{a}.unsqueeze(0)"
        d = rng.randrange(ta.dim())
        n = ta.shape[d]
        u = rng.random()
        if u < 0.3 and n > 1:
            s = rng.randrange(n - 1)
            return f"{a}.narrow({d}, {s}, {rng.randint(1, n - s)})"
        if u < 0.45 and ta.dim() >= 2:
            return f"{a}.transpose({d}, {rng.randrange(ta.dim())})"
        if u < 0.6 and n > 0:
            return f"{a}.select({d}, {rng.randrange(n)})"
        if u < 0.7:
            return f"{a}[..., ::2]"
        if u < 0.8:
            return f"{a}.reshape(-1)"
        if u < 0.9 and n > 1:
            return f"{a}[1:]" if d == 0 else f"{a}.narrow({d}, 1, {n - 1})"
        return f"{a}.unsqueeze(0).expand(2, *{a}.shape)"

    def _snippet_write_view_read_other(self, rng, env):
        """w = a view of a; r = another view of a; maybe a read of r; a write
        through w; reads of r and a afterwards."""
        names = [n for n in self.names if env[n].numel() > 0]
        if not names:
            return
        a = rng.choice(names)
        self._form = "view"
        w = yield (f"{self._name()} = {self._view_source(rng, env, a)}", self._name())
        if w is None or w is True:
            return
        r = yield (f"{self._name()} = {self._view_source(rng, env, a)}", self._name())
        if r is None or r is True:
            r = a
        if rng.random() < 0.5:
            self._form = "read before a write through another view"
            yield self._read(rng, env, r)
        self._form = "write through a view, another view read later"
        u = rng.random()
        if u < 0.2:
            yield f"{w}.fill_({self._scalar(rng)})", None
        elif u < 0.3:
            yield f"{w}.zero_()", None
        else:
            src = rng.choice(self.names) if rng.random() < 0.7 else self._scalar(rng)
            yield self._in_place(rng, w, src)
        for x in [r, a][: rng.choice([1, 2])]:
            if x in self.names:
                self._form = "read after a write through another view"
                yield self._read(rng, env, x)

    def _candidate(self, rng, env):
        names = self.names
        a = rng.choice(names)
        if rng.random() < 0.35:  # extreme values through every op
            extreme = [n for n in names if _has_extremes(env[n])]
            if extreme:
                a = rng.choice(extreme)
                if rng.random() < 0.4:
                    return self._unary(rng, a)
        b = rng.choice(names)
        c = rng.choice(names)
        out = self._name()
        ta = env[a]
        pick = rng.random()
        if pick < 0.14:
            return self._unary(rng, a)
        if pick < 0.30:
            return self._binary(rng, a, b)
        if pick < 0.37:
            return f"{out} = torch.{rng.choice(BINARY_FNS)}({a}, {b})", out
        if pick < 0.44:
            form = rng.random()
            if form < 0.3:
                return f"{out} = torch.where({c} > 0, {a}, {b})", out
            if form < 0.5:
                lo, hi = sorted([round(rng.uniform(-2, 2), 2) for _ in range(2)])
                return f"{out} = torch.clamp({a}, min={lo}, max={hi})", out
            if form < 0.65:
                return f"{out} = torch.add({a}, {b}, alpha={self._scalar(rng)})", out
            if form < 0.8:
                return f"{out} = torch.addcmul({a}, {b}, {c}, value={round(rng.uniform(-2, 2), 2)})", out
            if form < 0.9:
                return f"{out} = torch.addcdiv({a}, {b}, {c}, value={round(rng.uniform(-2, 2), 2)})", out
            return f"{out} = torch.lerp({a}, {b}, {round(rng.uniform(0, 1), 2)})", out
        if pick < 0.49:
            return self._cast(rng, a)
        if pick < 0.58:  # in place, on an input, an intermediate or a view of one
            aliased = [n for n in names if self._aliases(env, n)]
            if aliased and rng.random() < 0.5:  # prefer a buffer that other names view
                a = rng.choice(aliased)
            op = rng.choice(INPLACE + ["fill_", "zero_", "copy_"])
            if op == "fill_":
                return f"{a}.fill_({self._scalar(rng)})", None
            if op == "zero_":
                return f"{a}.zero_()", None
            if op == "copy_":
                return f"{a}.copy_({b})", None
            return self._in_place(rng, a, b if rng.random() < 0.6 else self._scalar(rng), op=op)
        if pick < 0.64:
            return self._overlapping_in_place(rng, env)
        if pick < 0.69:
            return self._expanded_write(rng, env)
        if pick < 0.81:  # views
            if ta.dim() == 0:
                return f"{out} = {a}.unsqueeze(0)", out
            d = rng.randrange(ta.dim())
            form = rng.random()
            if form < 0.25 and ta.dim() >= 2:
                return f"{out} = {a}.transpose({d}, {rng.randrange(ta.dim())})", out
            if form < 0.45 and ta.shape[d] > 1:
                return f"{out} = {a}.narrow({d}, 1, {ta.shape[d] - 1})", out
            if form < 0.6:
                return (f"{out} = {a}.select({d}, 0)", out) if ta.shape[d] > 0 else (None, None)
            if form < 0.75:
                return f"{out} = {self._expanded(rng, env, a)}", out
            if form < 0.9:
                return f"{out} = {a}[..., ::2]", out
            return f"{out} = {a}.reshape(-1)", out
        if pick < 0.94:
            return self._reduction(rng, env, a)
        # free an intermediate before the sync: its stores must vanish, not its consumers' results
        victim = rng.choice(names)
        if victim in self.inputs or len(self.names) < 2:
            return None, None
        return f"del {victim}", None
