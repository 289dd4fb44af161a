# Sum the calls= counts into each callee of a callgrind output file (names
# are compressed: "(id) name" defines an id on fn= or cfn= lines)
function parse(line, off,    p, id, rest) {
    p    = index(line, ")")
    id   = substr(line, off, p - off)
    rest = substr(line, p + 2)
    if (rest != "") name[id] = rest
    return name[id]
}
/^fn=\(/  { parse($0, 5) }
/^cfn=\(/ { cur = parse($0, 6) }
/^calls=/ { split(substr($0, 7), c, " "); calls[cur] += c[1] }
END { for (f in calls) print f, calls[f] }
