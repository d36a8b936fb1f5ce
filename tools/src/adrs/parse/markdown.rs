//! One pass of a CommonMark parser over the body: headings with their extent and whether their
//! section has content, links and images, and the lines inside code and HTML blocks.

use std::ops::Range;

use pulldown_cmark::{Event, LinkType, Options, Parser, Tag, TagEnd};

use super::Link;

pub(super) struct LineIndex {
    starts: Vec<usize>,
}

impl LineIndex {
    pub(super) fn new(text: &str) -> Self {
        let mut starts = vec![0];
        starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        LineIndex { starts }
    }

    fn line_of(&self, offset: usize) -> u32 {
        self.starts.partition_point(|&s| s <= offset) as u32
    }

    fn last_line(&self, range: &Range<usize>) -> u32 {
        self.line_of(range.end.saturating_sub(1).max(range.start))
    }
}

pub(super) struct Heading {
    pub(super) title: String,
    pub(super) level: u8,
    pub(super) line: u32,
    pub(super) end_line: u32,
    pub(super) has_content: bool,
}

pub(super) struct Markdown {
    pub(super) headings: Vec<Heading>,
    pub(super) links: Vec<Link>,
    /// Indexed by line number: inside a code block or an HTML block, where fields and references
    /// are examples or comments rather than statements.
    hidden: Vec<bool>,
}

impl Markdown {
    pub(super) fn is_hidden(&self, line: u32) -> bool {
        self.hidden.get(line as usize).copied().unwrap_or(false)
    }
}

pub(super) fn scan_markdown(body: &str, lines: &LineIndex) -> Markdown {
    let mut options = Options::empty();
    options.insert(Options::ENABLE_TABLES);
    options.insert(Options::ENABLE_STRIKETHROUGH);
    options.insert(Options::ENABLE_TASKLISTS);
    options.insert(Options::ENABLE_FOOTNOTES);

    let mut headings: Vec<Heading> = Vec::new();
    // Headings whose section is still open, outermost first.
    let mut open: Vec<usize> = Vec::new();
    let mut in_heading: Option<usize> = None;
    let mut links: Vec<Link> = Vec::new();
    let mut open_links: Vec<usize> = Vec::new();
    let mut html_block: Option<String> = None;
    let mut hidden = vec![false; lines.starts.len() + 2];
    let mut hide = |range: &Range<usize>| {
        for line in lines.line_of(range.start)..=lines.last_line(range) {
            if let Some(h) = hidden.get_mut(line as usize) {
                *h = true;
            }
        }
    };

    for (event, range) in Parser::new_ext(body, options).into_offset_iter() {
        let mut content = false;
        match event {
            Event::Start(Tag::Heading { level, .. }) => {
                let level = level as u8;
                while open.last().is_some_and(|&i| headings[i].level >= level) {
                    open.pop();
                }
                for &i in &open {
                    headings[i].has_content = true;
                }
                headings.push(Heading {
                    title: String::new(),
                    level,
                    line: lines.line_of(range.start),
                    end_line: lines.last_line(&range),
                    has_content: false,
                });
                open.push(headings.len() - 1);
                in_heading = Some(headings.len() - 1);
            }
            Event::End(TagEnd::Heading(_)) => in_heading = None,
            Event::Start(Tag::Link { link_type, dest_url, .. }) => {
                let target = if link_type == LinkType::Email {
                    format!("mailto:{dest_url}")
                } else {
                    dest_url.to_string()
                };
                open_links.push(links.len());
                links.push(Link { target, line: lines.line_of(range.start), text: String::new() });
                content = true;
            }
            Event::Start(Tag::Image { dest_url, .. }) => {
                open_links.push(links.len());
                links.push(Link {
                    target: dest_url.to_string(),
                    line: lines.line_of(range.start),
                    text: String::new(),
                });
                content = true;
            }
            Event::End(TagEnd::Link | TagEnd::Image) => {
                if let Some(link) = open_links.pop().and_then(|i| links.get_mut(i)) {
                    link.text = link.text.trim().to_owned();
                }
            }
            Event::Text(t) | Event::Code(t) => {
                if let Some(i) = in_heading {
                    headings[i].title.push_str(&t);
                }
                for &i in &open_links {
                    links[i].text.push_str(&t);
                }
                content = !t.trim().is_empty();
            }
            Event::SoftBreak | Event::HardBreak => {
                if let Some(i) = in_heading {
                    headings[i].title.push(' ');
                }
                for &i in &open_links {
                    links[i].text.push(' ');
                }
            }
            Event::Start(Tag::CodeBlock(_)) => {
                hide(&range);
                content = true;
            }
            Event::Start(Tag::HtmlBlock) => {
                hide(&range);
                html_block = Some(String::new());
            }
            Event::Html(t) => match html_block.as_mut() {
                Some(block) => block.push_str(&t),
                None => content = has_visible_html(&t),
            },
            Event::End(TagEnd::HtmlBlock) => {
                content = html_block.take().is_some_and(|b| has_visible_html(&b));
            }
            Event::InlineHtml(t) => content = has_visible_html(&t),
            Event::InlineMath(_)
            | Event::DisplayMath(_)
            | Event::FootnoteReference(_)
            | Event::TaskListMarker(_) => content = true,
            _ => {}
        }
        if content && in_heading.is_none() {
            for &i in &open {
                headings[i].has_content = true;
            }
        }
    }
    Markdown { headings, links, hidden }
}

fn has_visible_html(html: &str) -> bool {
    let mut rest = html;
    let mut visible = String::new();
    while let Some(start) = rest.find("<!--") {
        visible.push_str(&rest[..start]);
        rest = match rest[start + 4..].find("-->") {
            Some(end) => &rest[start + 4 + end + 3..],
            None => "",
        };
    }
    visible.push_str(rest);
    !visible.trim().is_empty()
}
