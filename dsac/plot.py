"""Learning curves: evaluation return against env steps and against wall seconds.

    dsac-plot runs/a runs/b --out curves.png
    dsac-plot runs/sac-s0 runs/sac-s1 runs/sac-s2 runs/dqn-s0 --out cmp.png

Runs whose config.json differ only in their seed are drawn as one curve, mean +- std
(shaded); others are overlaid, each with its directory's name.
"""

import sys

from dsac.errors import DsacError, OneLineParser, quiet_when_the_reader_leaves

AXES = (("env_steps", "env steps"), ("wall_s", "wall-clock seconds (from process start)"))


def plot(paths: list[str], out: str, group: bool = True, title: str | None = None) -> None:
    """Draw the two panels for the runs in ``paths`` and save them to ``out``."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display needed
    import matplotlib.pyplot as plt

    from dsac.output.curves import curves

    figure, panels = plt.subplots(1, 2, figsize=(12, 4.5), constrained_layout=True)
    for panel, (axis, xlabel) in zip(panels, AXES, strict=True):
        for curve in curves(paths, axis, group=group):
            (line,) = panel.plot(curve.x, curve.mean, label=curve.label, marker="." if len(curve.x) < 30 else None)
            if curve.runs > 1:
                panel.fill_between(curve.x, curve.mean - curve.std, curve.mean + curve.std,
                                   color=line.get_color(), alpha=0.2, linewidth=0)
        panel.set_xlabel(xlabel)
        panel.set_ylabel("evaluation return (mean)")
        panel.grid(alpha=0.3)
    panels[0].legend(loc="best", fontsize="small")
    if title:
        figure.suptitle(title)
    try:
        figure.savefig(out, dpi=100)
    except OSError as exc:
        raise DsacError(f"cannot write {out}: {exc.strerror or exc}") from None
    except ValueError as exc:  # matplotlib: an extension it has no writer for
        raise DsacError(f"cannot write {out}: {str(exc).splitlines()[0] if str(exc) else 'ValueError'}") from None
    finally:
        plt.close(figure)


@quiet_when_the_reader_leaves
def main(argv=None) -> int:
    parser = OneLineParser("plot", prog="dsac-plot", description=__doc__)
    parser.add_argument("runs", nargs="+", help="run directories (with progress.jsonl)")
    parser.add_argument("--out", default="curves.png", help="image to write (.png, .svg, .pdf)")
    parser.add_argument("--no-group", dest="group", action="store_false",
                        help="one curve per run, even for runs that differ only in their seed")
    parser.add_argument("--title", default=None, help="a title over both panels")
    args = parser.parse_args(argv)
    try:
        plot(args.runs, args.out, group=args.group, title=args.title)
    except DsacError as exc:
        print(f"plot: error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
