# Prints prefill / decode tok/s medians of lily bench JSON files: python3 tools/bench_summary.py FILE...
import json,sys
for f in sys.argv[1:]:
    try: d=json.load(open(f))
    except Exception as e: print(f, 'bad', e); continue
    print(f, ' '.join(f"{p['length']}:{p['tok_s']['median']:.0f}" for p in d.get('prefill',[])), ' | decode', ' '.join(f"{p.get('context')}:{p['tok_s']['median']:.1f}" for p in d.get('decode',[])))
