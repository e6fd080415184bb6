//! A small regular-expression engine with Go's RE2 syntax and semantics (leftmost search,
//! no backreferences, linear-time NFA simulation), for `pattern` and the string formats.
//!
//! Supported: literals and escapes, `.`, classes (`[a-z]`, `[^...]`, `[[:alpha:]]`, `\d\w\s`
//! and their negations, `\pL`/`\p{..}` approximated with Rust's char predicates), groups
//! (`(...)`, `(?:...)`, `(?P<n>...)`, `(?<n>...)`), flags `i`, `s`, `m`, `U`, alternation,
//! `* + ? {n} {n,} {n,m}` with lazy forms, and the assertions `^ $ \A \z \b \B`.

/// A compiled regular expression.
#[derive(Debug, Clone)]
pub(crate) struct Regex {
    prog: Vec<Inst>,
}

/// A parse failure, worded as Go's `regexp/syntax` words it (`error parsing regexp: ...`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RegexError(pub(crate) String);

#[derive(Debug, Clone, Copy, PartialEq)]
enum Assertion {
    TextStart,
    TextEnd,
    LineStart,
    LineEnd,
    WordBoundary,
    NotWordBoundary,
}

#[derive(Debug, Clone)]
enum ClassItem {
    Range(char, char),
    Pred(fn(char) -> bool, bool),
    /// Matches when none of the items match (`[\D]`, `[\PL]`).
    None(Vec<ClassItem>),
}

fn item_matches(item: &ClassItem, c: char) -> bool {
    match item {
        ClassItem::Range(lo, hi) => *lo <= c && c <= *hi,
        ClassItem::Pred(f, positive) => f(c) == *positive,
        ClassItem::None(items) => !items.iter().any(|i| item_matches(i, c)),
    }
}

#[derive(Debug, Clone)]
struct Class {
    items: Vec<ClassItem>,
    negated: bool,
    fold: bool,
}

impl Class {
    fn matches(&self, c: char) -> bool {
        let hit = |c: char| self.items.iter().any(|item| item_matches(item, c));
        let mut m = hit(c);
        if !m && self.fold {
            m = fold_variants(c).into_iter().any(hit);
        }
        m != self.negated
    }
}

fn fold_variants(c: char) -> Vec<char> {
    let mut out = Vec::new();
    for l in c.to_lowercase() {
        if l != c {
            out.push(l);
        }
    }
    for u in c.to_uppercase() {
        if u != c {
            out.push(u);
        }
    }
    out
}

#[derive(Debug, Clone)]
enum Node {
    Empty,
    Lit(char, bool),
    Any(bool),
    Class(Class),
    Assert(Assertion),
    Concat(Vec<Node>),
    Alt(Vec<Node>),
    Repeat(Box<Node>, u32, Option<u32>),
}

#[derive(Debug, Clone)]
enum Inst {
    Lit(char, bool),
    Any(bool),
    Class(Class),
    Assert(Assertion),
    Split(usize, usize),
    Jmp(usize),
    Match,
}

#[derive(Clone, Copy)]
struct Flags {
    fold: bool,
    dot_nl: bool,
    multi_line: bool,
}

const MAX_REPEAT: u32 = 1000;
const MAX_PROG: usize = 100_000;

fn err(code: &str, expr: &str) -> RegexError {
    RegexError(format!("error parsing regexp: {code}: `{expr}`"))
}

struct Parser<'a> {
    src: &'a str,
    chars: Vec<char>,
    pos: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    fn rest(&self, from: usize) -> String {
        self.chars[from.min(self.chars.len())..].iter().collect()
    }

    fn parse_alt(&mut self, flags: &mut Flags, depth: usize) -> Result<Node, RegexError> {
        if depth > 500 {
            return Err(err("expression nests too deeply", self.src));
        }
        let mut alts = vec![self.parse_concat(flags, depth)?];
        while self.peek() == Some('|') {
            self.pos += 1;
            alts.push(self.parse_concat(flags, depth)?);
        }
        Ok(if alts.len() == 1 {
            alts.pop().unwrap_or(Node::Empty)
        } else {
            Node::Alt(alts)
        })
    }

    fn parse_concat(&mut self, flags: &mut Flags, depth: usize) -> Result<Node, RegexError> {
        let mut items: Vec<Node> = Vec::new();
        while let Some(c) = self.peek() {
            if c == '|' || c == ')' {
                break;
            }
            let start = self.pos;
            let atom = match c {
                '(' => {
                    self.pos += 1;
                    match self.parse_group(flags, depth)? {
                        Some(n) => n,
                        None => continue,
                    }
                }
                '*' | '+' | '?' => {
                    return Err(err(
                        "missing argument to repetition operator",
                        &c.to_string(),
                    ));
                }
                '{' if self.repeat_spec().is_some() => {
                    let (_, _, len) = self.repeat_spec().unwrap_or((0, None, 1));
                    let op: String = self.chars[self.pos..self.pos + len].iter().collect();
                    return Err(err("missing argument to repetition operator", &op));
                }
                _ => self.parse_atom(*flags)?,
            };
            let atom = self.parse_repeats(atom, start)?;
            items.push(atom);
        }
        Ok(match items.len() {
            0 => Node::Empty,
            1 => items.pop().unwrap_or(Node::Empty),
            _ => Node::Concat(items),
        })
    }

    fn parse_repeats(&mut self, mut atom: Node, start: usize) -> Result<Node, RegexError> {
        let mut repeated = false;
        loop {
            let op_start = self.pos;
            let (min, max) = match self.peek() {
                Some('*') => {
                    self.pos += 1;
                    (0, None)
                }
                Some('+') => {
                    self.pos += 1;
                    (1, None)
                }
                Some('?') => {
                    self.pos += 1;
                    (0, Some(1))
                }
                Some('{') => match self.repeat_spec() {
                    Some((min, max, len)) => {
                        self.pos += len;
                        if min > MAX_REPEAT || max.is_some_and(|m| m > MAX_REPEAT || m < min) {
                            let op: String = self.chars[op_start..self.pos].iter().collect();
                            return Err(err("invalid repeat count", &op));
                        }
                        (min, max)
                    }
                    None => return Ok(atom),
                },
                _ => return Ok(atom),
            };
            // Lazy forms match the same set of strings.
            if self.peek() == Some('?') {
                self.pos += 1;
            }
            if repeated {
                let op = self.rest(start);
                let op: String = op.chars().take(self.pos - start).collect();
                return Err(err("invalid nested repetition operator", &op));
            }
            repeated = true;
            atom = Node::Repeat(Box::new(atom), min, max);
        }
    }

    /// `{n}`, `{n,}` or `{n,m}` at the cursor: (min, max, length in chars).
    fn repeat_spec(&self) -> Option<(u32, Option<u32>, usize)> {
        let mut i = self.pos + 1;
        let num = |i: &mut usize| {
            let s = *i;
            while self.chars.get(*i).is_some_and(|c| c.is_ascii_digit()) {
                *i += 1;
            }
            if *i == s {
                return None;
            }
            let text: String = self.chars[s..*i].iter().collect();
            Some(text.parse::<u32>().unwrap_or(u32::MAX))
        };
        let min = num(&mut i)?;
        let max = if self.chars.get(i) == Some(&',') {
            i += 1;
            if self.chars.get(i) == Some(&'}') {
                None
            } else {
                Some(num(&mut i)?)
            }
        } else {
            Some(min)
        };
        if self.chars.get(i) != Some(&'}') {
            return None;
        }
        Some((min, max, i + 1 - self.pos))
    }

    /// After `(`: a group, or a flag change (`None`).
    fn parse_group(&mut self, flags: &mut Flags, depth: usize) -> Result<Option<Node>, RegexError> {
        let open = self.pos - 1;
        let mut inner_flags = *flags;
        if self.peek() == Some('?') {
            self.pos += 1;
            match self.peek() {
                Some('P') | Some('<') => {
                    if self.peek() == Some('P') {
                        self.pos += 1;
                    }
                    if self.peek() != Some('<') {
                        return Err(err("invalid or unsupported Perl syntax", &self.rest(open)));
                    }
                    let name_start = self.pos + 1;
                    let Some(end) = self.chars[name_start..].iter().position(|c| *c == '>') else {
                        return Err(err("invalid named capture", &self.rest(open)));
                    };
                    let name = &self.chars[name_start..name_start + end];
                    if name.is_empty() || !name.iter().all(|c| c.is_alphanumeric() || *c == '_') {
                        let text: String = self.chars[open..name_start + end + 1].iter().collect();
                        return Err(err("invalid named capture", &text));
                    }
                    self.pos = name_start + end + 1;
                }
                _ => {
                    let mut negate = false;
                    loop {
                        match self.peek() {
                            Some('i') => inner_flags.fold = !negate,
                            Some('s') => inner_flags.dot_nl = !negate,
                            Some('m') => inner_flags.multi_line = !negate,
                            Some('U') => {}
                            Some('-') if !negate => negate = true,
                            Some(')') => {
                                self.pos += 1;
                                *flags = inner_flags;
                                return Ok(None);
                            }
                            Some(':') => {
                                self.pos += 1;
                                break;
                            }
                            _ => {
                                let text: String = self.chars
                                    [open..(self.pos + 1).min(self.chars.len())]
                                    .iter()
                                    .collect();
                                return Err(err("invalid or unsupported Perl syntax", &text));
                            }
                        }
                        self.pos += 1;
                    }
                }
            }
        }
        let node = self.parse_alt(&mut inner_flags, depth + 1)?;
        if self.peek() != Some(')') {
            return Err(err("missing closing )", self.src));
        }
        self.pos += 1;
        Ok(Some(node))
    }

    fn parse_atom(&mut self, flags: Flags) -> Result<Node, RegexError> {
        let c = self.peek().unwrap_or('\0');
        self.pos += 1;
        Ok(match c {
            '.' => Node::Any(flags.dot_nl),
            '^' => Node::Assert(if flags.multi_line {
                Assertion::LineStart
            } else {
                Assertion::TextStart
            }),
            '$' => Node::Assert(if flags.multi_line {
                Assertion::LineEnd
            } else {
                Assertion::TextEnd
            }),
            '[' => Node::Class(self.parse_class(flags)?),
            '\\' => self.parse_escape(flags, false)?,
            c => Node::Lit(c, flags.fold),
        })
    }

    /// After `\`. Inside a class only character-producing escapes are allowed.
    fn parse_escape(&mut self, flags: Flags, in_class: bool) -> Result<Node, RegexError> {
        let start = self.pos - 1;
        let Some(c) = self.peek() else {
            return Err(err("trailing backslash at end of expression", ""));
        };
        self.pos += 1;
        let class = |items: Vec<ClassItem>, negated: bool| {
            Node::Class(Class {
                items,
                negated,
                fold: false,
            })
        };
        Ok(match c {
            'd' | 'D' => class(vec![ClassItem::Range('0', '9')], c == 'D'),
            'w' | 'W' => class(
                vec![
                    ClassItem::Range('0', '9'),
                    ClassItem::Range('A', 'Z'),
                    ClassItem::Range('a', 'z'),
                    ClassItem::Range('_', '_'),
                ],
                c == 'W',
            ),
            's' | 'S' => class(
                vec![
                    ClassItem::Range('\t', '\n'),
                    ClassItem::Range('\u{c}', '\r'),
                    ClassItem::Range(' ', ' '),
                ],
                c == 'S',
            ),
            'p' | 'P' => {
                let name: String = if self.peek() == Some('{') {
                    let Some(end) = self.chars[self.pos..].iter().position(|c| *c == '}') else {
                        return Err(err("invalid character class range", &self.rest(start)));
                    };
                    let n = self.chars[self.pos + 1..self.pos + end].iter().collect();
                    self.pos += end + 1;
                    n
                } else {
                    let n = self.peek().map(String::from).unwrap_or_default();
                    self.pos += 1;
                    n
                };
                let (name, neg) = match name.strip_prefix('^') {
                    Some(n) => (n.to_string(), true),
                    None => (name, false),
                };
                let Some(pred) = unicode_class(&name) else {
                    let text: String = self.chars[start..self.pos.min(self.chars.len())]
                        .iter()
                        .collect();
                    return Err(err("invalid character class range", &text));
                };
                class(vec![ClassItem::Pred(pred, true)], (c == 'P') != neg)
            }
            'A' if !in_class => Node::Assert(Assertion::TextStart),
            'z' if !in_class => Node::Assert(Assertion::TextEnd),
            'b' if !in_class => Node::Assert(Assertion::WordBoundary),
            'B' if !in_class => Node::Assert(Assertion::NotWordBoundary),
            'n' => Node::Lit('\n', false),
            't' => Node::Lit('\t', false),
            'r' => Node::Lit('\r', false),
            'f' => Node::Lit('\u{c}', false),
            'v' => Node::Lit('\u{b}', false),
            'a' => Node::Lit('\u{7}', false),
            'x' => {
                let digits: String = if self.peek() == Some('{') {
                    let Some(end) = self.chars[self.pos..].iter().position(|c| *c == '}') else {
                        return Err(err("invalid escape sequence", &self.rest(start)));
                    };
                    let d = self.chars[self.pos + 1..self.pos + end].iter().collect();
                    self.pos += end + 1;
                    d
                } else {
                    let d = self.chars[self.pos..(self.pos + 2).min(self.chars.len())]
                        .iter()
                        .collect();
                    self.pos += 2;
                    d
                };
                match u32::from_str_radix(&digits, 16)
                    .ok()
                    .and_then(char::from_u32)
                {
                    Some(ch) => Node::Lit(ch, flags.fold),
                    None => {
                        let text: String = self.chars[start..self.pos.min(self.chars.len())]
                            .iter()
                            .collect();
                        return Err(err("invalid escape sequence", &text));
                    }
                }
            }
            c if c.is_ascii_punctuation() => Node::Lit(c, flags.fold),
            c => return Err(err("invalid escape sequence", &format!("\\{c}"))),
        })
    }

    /// After `[`.
    fn parse_class(&mut self, flags: Flags) -> Result<Class, RegexError> {
        let start = self.pos - 1;
        let mut class = Class {
            items: Vec::new(),
            negated: false,
            fold: flags.fold,
        };
        if self.peek() == Some('^') {
            class.negated = true;
            self.pos += 1;
        }
        let mut first = true;
        loop {
            let Some(c) = self.peek() else {
                return Err(err("missing closing ]", &self.rest(start)));
            };
            if c == ']' && !first {
                self.pos += 1;
                return Ok(class);
            }
            first = false;
            if c == '[' && self.chars.get(self.pos + 1) == Some(&':') {
                let tail: String = self.rest(self.pos);
                if let Some(end) = tail.find(":]") {
                    let name = &tail[2..end];
                    let (name, neg) = match name.strip_prefix('^') {
                        Some(n) => (n, true),
                        None => (name, false),
                    };
                    let Some(pred) = posix_class(name) else {
                        return Err(err("invalid character class range", &tail[..end + 2]));
                    };
                    class.items.push(ClassItem::Pred(pred, !neg));
                    self.pos += tail[..end + 2].chars().count();
                    continue;
                }
            }
            let lo = self.class_char(flags)?;
            let lo = match lo {
                Ok(ch) => ch,
                Err(items) => {
                    class.items.extend(items);
                    continue;
                }
            };
            if self.peek() == Some('-') && self.chars.get(self.pos + 1).is_some_and(|c| *c != ']') {
                let range_start = self.pos - 1;
                self.pos += 1;
                match self.class_char(flags)? {
                    Ok(hi) if hi >= lo => class.items.push(ClassItem::Range(lo, hi)),
                    _ => {
                        let text: String = self.chars[range_start.saturating_sub(0)..self.pos]
                            .iter()
                            .collect();
                        return Err(err("invalid character class range", &text));
                    }
                }
            } else {
                class.items.push(ClassItem::Range(lo, lo));
            }
        }
    }

    /// One class member: a single char, or the items of an escape class.
    fn class_char(&mut self, flags: Flags) -> Result<Result<char, Vec<ClassItem>>, RegexError> {
        let Some(c) = self.peek() else {
            return Err(err("missing closing ]", self.src));
        };
        self.pos += 1;
        if c != '\\' {
            return Ok(Ok(c));
        }
        match self.parse_escape(flags, true)? {
            Node::Lit(ch, _) => Ok(Ok(ch)),
            Node::Class(inner) => {
                if inner.negated {
                    Ok(Err(vec![ClassItem::None(inner.items)]))
                } else {
                    Ok(Err(inner.items))
                }
            }
            _ => Err(err("invalid escape sequence", self.src)),
        }
    }
}

fn is_letter(c: char) -> bool {
    c.is_alphabetic()
}

fn is_symbol(c: char) -> bool {
    if c.is_ascii() {
        return matches!(c, '$' | '+' | '<' | '=' | '>' | '^' | '`' | '|' | '~');
    }
    !(c.is_alphanumeric() || c.is_whitespace() || c.is_control())
}

fn unicode_class(name: &str) -> Option<fn(char) -> bool> {
    Some(match name {
        "L" | "Letter" => is_letter,
        "Lu" => |c| c.is_uppercase(),
        "Ll" => |c| c.is_lowercase(),
        "N" | "Nd" => |c| c.is_numeric(),
        "S" => is_symbol,
        "Z" | "Zs" => |c| c.is_whitespace() && !c.is_control(),
        "P" => |c| c.is_ascii_punctuation() && !is_symbol(c),
        "Greek" => {
            |c| ('\u{370}'..='\u{3ff}').contains(&c) || ('\u{1f00}'..='\u{1fff}').contains(&c)
        }
        "Han" => {
            |c| ('\u{4e00}'..='\u{9fff}').contains(&c) || ('\u{3400}'..='\u{4dbf}').contains(&c)
        }
        "Latin" => |c| {
            c.is_ascii_alphabetic() || (c.is_alphabetic() && ('\u{c0}'..='\u{24f}').contains(&c))
        },
        "Cyrillic" => |c| ('\u{400}'..='\u{4ff}').contains(&c),
        "Any" => |_| true,
        _ => return None,
    })
}

fn posix_class(name: &str) -> Option<fn(char) -> bool> {
    Some(match name {
        "alnum" => |c| c.is_ascii_alphanumeric(),
        "alpha" => |c| c.is_ascii_alphabetic(),
        "ascii" => |c| c.is_ascii(),
        "blank" => |c| c == ' ' || c == '\t',
        "cntrl" => |c| c.is_ascii_control(),
        "digit" => |c| c.is_ascii_digit(),
        "graph" => |c| c.is_ascii_graphic(),
        "lower" => |c| c.is_ascii_lowercase(),
        "print" => |c| c.is_ascii_graphic() || c == ' ',
        "punct" => |c| c.is_ascii_punctuation(),
        "space" => |c| matches!(c, '\t' | '\n' | '\u{b}' | '\u{c}' | '\r' | ' '),
        "upper" => |c| c.is_ascii_uppercase(),
        "word" => |c| c.is_ascii_alphanumeric() || c == '_',
        "xdigit" => |c| c.is_ascii_hexdigit(),
        _ => return None,
    })
}

struct Compiler {
    prog: Vec<Inst>,
}

impl Compiler {
    fn emit(&mut self, inst: Inst) -> Result<usize, RegexError> {
        if self.prog.len() >= MAX_PROG {
            return Err(RegexError(
                "error parsing regexp: expression too large".to_string(),
            ));
        }
        self.prog.push(inst);
        Ok(self.prog.len() - 1)
    }

    fn compile(&mut self, node: &Node) -> Result<(), RegexError> {
        match node {
            Node::Empty => {}
            Node::Lit(c, fold) => {
                self.emit(Inst::Lit(*c, *fold))?;
            }
            Node::Any(nl) => {
                self.emit(Inst::Any(*nl))?;
            }
            Node::Class(c) => {
                self.emit(Inst::Class(c.clone()))?;
            }
            Node::Assert(a) => {
                self.emit(Inst::Assert(*a))?;
            }
            Node::Concat(items) => {
                for item in items {
                    self.compile(item)?;
                }
            }
            Node::Alt(alts) => {
                let mut jumps = Vec::new();
                for (i, alt) in alts.iter().enumerate() {
                    if i + 1 < alts.len() {
                        let split = self.emit(Inst::Split(0, 0))?;
                        self.compile(alt)?;
                        jumps.push(self.emit(Inst::Jmp(0))?);
                        let next = self.prog.len();
                        self.prog[split] = Inst::Split(split + 1, next);
                    } else {
                        self.compile(alt)?;
                    }
                }
                let end = self.prog.len();
                for j in jumps {
                    self.prog[j] = Inst::Jmp(end);
                }
            }
            Node::Repeat(inner, min, max) => {
                for _ in 0..*min {
                    self.compile(inner)?;
                }
                match max {
                    None => {
                        let split = self.emit(Inst::Split(0, 0))?;
                        self.compile(inner)?;
                        self.emit(Inst::Jmp(split))?;
                        let end = self.prog.len();
                        self.prog[split] = Inst::Split(split + 1, end);
                    }
                    Some(max) => {
                        let mut splits = Vec::new();
                        for _ in *min..*max {
                            splits.push(self.emit(Inst::Split(0, 0))?);
                            self.compile(inner)?;
                        }
                        let end = self.prog.len();
                        for s in splits {
                            self.prog[s] = Inst::Split(s + 1, end);
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

fn is_word(c: Option<char>) -> bool {
    c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
}

impl Regex {
    /// Compiles `src` (Go RE2 syntax).
    pub(crate) fn new(src: &str) -> Result<Regex, RegexError> {
        let mut parser = Parser {
            src,
            chars: src.chars().collect(),
            pos: 0,
        };
        let mut flags = Flags {
            fold: false,
            dot_nl: false,
            multi_line: false,
        };
        let node = parser.parse_alt(&mut flags, 0)?;
        if parser.pos < parser.chars.len() {
            return Err(err("unexpected )", src));
        }
        let mut compiler = Compiler { prog: Vec::new() };
        compiler.compile(&node)?;
        compiler.emit(Inst::Match)?;
        Ok(Regex {
            prog: compiler.prog,
        })
    }

    /// Whether the expression matches anywhere in `text` (Go's `MatchString`).
    pub(crate) fn is_match(&self, text: &str) -> bool {
        let chars: Vec<char> = text.chars().collect();
        let n = self.prog.len();
        let mut current: Vec<usize> = Vec::new();
        let mut next: Vec<usize> = Vec::new();
        let mut seen = vec![usize::MAX; n];
        let mut stack = Vec::new();
        for pos in 0..=chars.len() {
            // A new thread may start at every position (unanchored search).
            if self.add(0, pos, &chars, &mut current, &mut seen, &mut stack) {
                return true;
            }
            if current.is_empty() {
                continue;
            }
            let Some(&c) = chars.get(pos) else {
                break;
            };
            next.clear();
            let step = pos + 1;
            for &pc in &current {
                let ok = match &self.prog[pc] {
                    Inst::Lit(l, fold) => *l == c || (*fold && fold_variants(c).contains(l)),
                    Inst::Any(nl) => *nl || c != '\n',
                    Inst::Class(class) => class.matches(c),
                    _ => false,
                };
                if ok && self.add(pc + 1, step, &chars, &mut next, &mut seen, &mut stack) {
                    return true;
                }
            }
            std::mem::swap(&mut current, &mut next);
        }
        false
    }

    /// Adds the thread at `pc` and its epsilon closure at `pos`; true on reaching `Match`.
    fn add(
        &self,
        pc: usize,
        pos: usize,
        chars: &[char],
        list: &mut Vec<usize>,
        seen: &mut [usize],
        stack: &mut Vec<usize>,
    ) -> bool {
        stack.clear();
        stack.push(pc);
        while let Some(pc) = stack.pop() {
            if pc >= self.prog.len() || seen[pc] == pos {
                continue;
            }
            seen[pc] = pos;
            match &self.prog[pc] {
                Inst::Match => return true,
                Inst::Jmp(t) => stack.push(*t),
                Inst::Split(a, b) => {
                    stack.push(*b);
                    stack.push(*a);
                }
                Inst::Assert(a) => {
                    let prev = if pos == 0 {
                        None
                    } else {
                        chars.get(pos - 1).copied()
                    };
                    let cur = chars.get(pos).copied();
                    let ok = match a {
                        Assertion::TextStart => pos == 0,
                        Assertion::TextEnd => pos == chars.len(),
                        Assertion::LineStart => pos == 0 || prev == Some('\n'),
                        Assertion::LineEnd => pos == chars.len() || cur == Some('\n'),
                        Assertion::WordBoundary => is_word(prev) != is_word(cur),
                        Assertion::NotWordBoundary => is_word(prev) == is_word(cur),
                    };
                    if ok {
                        stack.push(pc + 1);
                    }
                }
                _ => list.push(pc),
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(re: &str, s: &str) -> bool {
        Regex::new(re).map(|r| r.is_match(s)).unwrap_or(false)
    }

    #[test]
    fn matches_like_go() {
        assert!(m("^[a-z]+$", "abc"));
        assert!(!m("^[a-z]+$", "abC"));
        assert!(m("(?i)^[a-z]+$", "abC"));
        assert!(m("b", "abc"));
        assert!(m("^a{2,3}$", "aaa"));
        assert!(!m("^a{2,3}$", "aaaa"));
        assert!(m(r"^\d{3}-\d+$", "123-4"));
        assert!(m("^(foo|bar)baz$", "barbaz"));
        assert!(!m("^(foo|bar)baz$", "bazbaz"));
        assert!(m(r"^[^\s]+$", "abc"));
        assert!(!m(r"^[^\s]+$", "a c"));
        assert!(m(r"\bfoo\b", "a foo b"));
        assert!(m("^$", ""));
        assert!(m(r"^[\p{L}]+$", "héllo"));
    }

    #[test]
    fn rejects_like_go() {
        assert_eq!(
            Regex::new("(").err(),
            Some(RegexError(
                "error parsing regexp: missing closing ): `(`".into()
            ))
        );
        assert_eq!(
            Regex::new("*a").err(),
            Some(RegexError(
                "error parsing regexp: missing argument to repetition operator: `*`".into()
            ))
        );
        assert_eq!(
            Regex::new("[a").err(),
            Some(RegexError(
                "error parsing regexp: missing closing ]: `[a`".into()
            ))
        );
        assert!(Regex::new("a)").is_err());
    }
}
