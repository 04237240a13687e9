"""File-level dependency cycles (pairs) under src/: any `crate::a::b` or `super::x` path."""
# Usage: python3 scripts/import_cycles.py [-v]: pairs of files under src/ that use each other (crate:: or super:: paths); -v lists every edge.
import os,re,sys
root='src'
files={}
for d,_,fs in os.walk(root):
    for f in fs:
        if f.endswith('.rs'):
            p=os.path.join(d,f); rel=os.path.relpath(p,root)[:-3].split(os.sep)
            if rel[-1]=='mod': rel=rel[:-1]
            if rel in (['main'],['lib']): rel=[]
            files[tuple(rel)]=p
def resolve(segs):
    for n in range(len(segs),-1,-1):
        if tuple(segs[:n]) in files: return tuple(segs[:n])
def module_of(p):
    for k,v in files.items():
        if v==p: return k
deps={}
for mod,p in files.items():
    t=open(p).read()
    t=re.sub(r'//[^\n]*','',t)
    # cut #[cfg(test)] mod tests { ... } roughly: ignore after 'mod tests'
    i=t.find('#[cfg(test)]\nmod tests')
    if i>=0: t=t[:i]
    ds=set()
    # expand use groups: collect paths like crate::a::b and crate::a::{b, c::d}
    for m in re.finditer(r'\b(crate|super)((?:::\w+)*)(?:::\{([^;]*?)\})?',t):
        base=[] if m.group(1)=='crate' else list(mod[:-1]) if not files[mod].endswith('mod.rs') else list(mod[:-1])
        # super from a mod.rs file: parent of the module dir; from x.rs: parent module
        segs=base+[s for s in m.group(2).split('::') if s]
        subs=[]
        if m.group(3):
            for part in re.split(r',',m.group(3)):
                w=re.findall(r'\w+',part.split(' as ')[0])
                if w and w[0]!='self': subs.append(w[:2])
        targets=[segs+s for s in subs] or [segs]
        if m.group(3) and not subs: targets=[segs]
        for tg in targets+[segs]:
            r=resolve(tg)
            if r is not None and r!=mod and r!=():
                ds.add(r)
    deps[mod]=ds
def name(m): return '/'.join(m) or 'main'
# parent module files (mod.rs) re-exporting children are not counted as cycles with their children
found=[]
for a in deps:
    for b in deps[a]:
        if a<b and a in deps.get(b,()):
            if a==b[:len(a)] or b==a[:len(b)]: kind='parent/child'
            else: kind='sibling'
            found.append((kind,name(a),name(b)))
for f in sorted(found): print(*f)
if '-v' in sys.argv:
    for a in sorted(deps): print(name(a),'->',sorted(name(b) for b in deps[a]))
