# The import graph between top-level modules of src/ (`crate::X` outside tests and fuzzing),
# with its cycles: `python3 tools/module_cycles.py .` from the repository root.
import os,re,sys
root=sys.argv[1]+'/src'
edges={}
def top(path):
    rel=os.path.relpath(path,root)
    parts=rel.split('/')
    return parts[0].removesuffix('.rs')
for d,_,fs in os.walk(root):
    for f in fs:
        if not f.endswith('.rs') or f=='tests.rs' or f.endswith('_tests.rs') or 'fuzzing' in d or f=='fuzzing.rs': continue
        p=os.path.join(d,f); m=top(p)
        if m in ('lib','main'): continue
        text=open(p).read()
        i=text.find('#[cfg(test)]\nmod tests {')
        if i>=0: text=text[:i]
        text='\n'.join(l for l in text.split('\n') if not l.strip().startswith('//'))
        for t in re.findall(r'crate::([a-z_0-9]+)',text):
            if t!=m: edges.setdefault(m,set()).add(t)
        for t in re.findall(r'use crate::\{([^}]*)\}',text):
            for x in re.findall(r'(?:^|,)\s*([a-z_0-9]+)',t):
                if x!=m: edges.setdefault(m,set()).add(x)
nodes=set(edges)|{t for v in edges.values() for t in v}
idx={};low={};st=[];on=set();res=[];c=[0]
sys.setrecursionlimit(10000)
def sc(v):
    idx[v]=low[v]=c[0];c[0]+=1;st.append(v);on.add(v)
    for w in edges.get(v,()):
        if w not in idx: sc(w);low[v]=min(low[v],low[w])
        elif w in on: low[v]=min(low[v],idx[w])
    if low[v]==idx[v]:
        comp=[]
        while True:
            w=st.pop();on.discard(w);comp.append(w)
            if w==v:break
        res.append(comp)
for v in sorted(nodes):
    if v not in idx: sc(v)
for comp in res:
    if len(comp)>1: print('cycle:',sorted(comp))
print('http1 imports:',sorted(edges.get('http1',())))
for m in sorted(edges):
    print(m,'->',sorted(edges[m]))
