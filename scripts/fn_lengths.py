"""Count fn lengths (fn line .. closing brace) in Rust files; strips strings/comments first."""
# Usage: python3 scripts/fn_lengths.py [src] [limit]: functions longer than limit (60) lines, fn line to closing brace.
import re,sys,os
def strip(t):
    o=[];i=0;n=len(t)
    while i<n:
        c=t[i]
        if t.startswith('//',i):
            j=t.find('\n',i); j=n if j<0 else j; i=j; continue
        if t.startswith('/*',i):
            j=t.find('*/',i)+2; o.append('\n'*t.count('\n',i,j)); i=j; continue
        m=re.match(r'b?r(#*)"',t[i:i+10])
        if m and (i==0 or not (t[i-1].isalnum() or t[i-1]=='_')):
            end='"'+m.group(1); j=t.find(end,i+len(m.group(0)))+len(end)
            o.append('""'+'\n'*t.count('\n',i,j)); i=j; continue
        if c=='"':
            j=i+1
            while t[j]!='"': j+=2 if t[j]=='\\' else 1
            j+=1; o.append('""'+'\n'*t.count('\n',i,j)); i=j; continue
        if c=="'":
            m=re.match(r"'(\\[^']+|[^\\'])'",t[i:i+12])
            if m: o.append("''"); i+=len(m.group(0)); continue
        o.append(c); i+=1
    return ''.join(o)
fnre=re.compile(r'^\s*(pub(\([^)]*\))?\s+)?(const\s+)?(unsafe\s+)?(extern\s+""\s+)?fn\s+(\w+)')
def scan(path):
    src=strip(open(path).read()).split('\n'); out=[]
    for i,l in enumerate(src):
        m=fnre.match(l)
        if not m: continue
        depth=0;started=False;done=False;par=0
        for j in range(i,len(src)):
            for c in src[j]:
                if c=='{': depth+=1;started=True
                elif c=='}':
                    depth-=1
                    if started and depth==0: out.append((j-i+1,path,i+1,m.group(6)));done=True;break
                elif c in '([': par+=1
                elif c in ')]': par-=1
                elif c==';' and not started and par==0: done=True;break
            if done: break
    return out
res=[]
for root,_,fs in os.walk(sys.argv[1] if len(sys.argv)>1 else 'src'):
    for f in fs:
        if f.endswith('.rs'): res+=scan(os.path.join(root,f))
lim=int(sys.argv[2]) if len(sys.argv)>2 else 60
for n,p,l,name in sorted(res,reverse=True):
    if n>lim: print(f"{n:4} {p}:{l} {name}")
