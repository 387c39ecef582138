# Per-kernel times of decode steps and verifies from an ncu CSV (`ncu --graph-profiling node --metrics
# gpu__time_duration.sum --kernel-name-base demangled --csv lily bench ... > F.csv`): each window from an embed
# kernel to the next lm_head kernel is one step (202 kernels for a plain step of the real model, more for a verify
# of several rows, 11 for an MTP draft); prints, for the median window of each size, every kernel (and grid) with
# its count, total and mean microseconds. ncu runs each kernel alone (no PDL overlap, its own clocks and cache
# control): the shares and the ratios between windows are what it shows, not a graph's time.
# Usage: python3 tools/ncu_step_kernels.py F.csv [MIN_KERNELS [MAX_KERNELS]]  (windows of that many kernels; 100 400)
import collections
import csv
import re
import sys


def load(path):
    lines = open(path).read().split('\n')
    start = next(i for i, l in enumerate(lines) if l.startswith('"ID"'))
    return [d for d in csv.DictReader(lines[start:]) if d.get('Metric Name') == 'gpu__time_duration.sum']


def micros(d):
    v = float(d['Metric Value'].replace(',', ''))
    return {'ns': v / 1e3, 'us': v, 'usecond': v, 'msecond': v * 1e3, 'ms': v * 1e3}.get(d['Metric Unit'], v)


def short(name):
    name = re.sub(r'lily::cuda::|\(anonymous namespace\)::|<?unnamed>::', '', name)
    return re.sub(r'\(.*', '', name)[:70]


def windows(rows):
    out, i = [], 0
    while i < len(rows):
        if 'k_embed' in rows[i]['Kernel Name']:
            j = i
            while j < len(rows) and 'lm_head' not in rows[j]['Kernel Name']:
                j += 1
            out.append((i, min(j, len(rows) - 1)))
            i = j + 1
        else:
            i += 1
    return out


def main():
    rows = load(sys.argv[1])
    min_k = int(sys.argv[2]) if len(sys.argv) > 2 else 100
    max_k = int(sys.argv[3]) if len(sys.argv) > 3 else 400
    by_size = collections.defaultdict(list)
    for i, j in windows(rows):
        by_size[j - i + 1].append((i, j))
    for size, ws in sorted(by_size.items()):
        if size < min_k or size > max_k:
            continue
        i, j = ws[len(ws) // 2]
        agg = {}
        for d in rows[i:j + 1]:
            a = agg.setdefault((short(d['Kernel Name']), d['Grid Size']), [0, 0.0])
            a[0] += 1
            a[1] += micros(d)
        total = sum(a[1] for a in agg.values())
        print(f'--- window of {size} kernels ({len(ws)} seen): {total:.0f} us')
        for (name, grid), (n, t) in sorted(agg.items(), key=lambda x: -x[1][1]):
            print(f'{n:4d} {t:9.1f} {t / n:8.2f}  {grid:>14}  {name}')


if __name__ == '__main__':
    main()
