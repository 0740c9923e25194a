//! What a file is, decided from its bytes (magic numbers), never from what the client declared;
//! an image's size in pixels and a PDF's pages, read on the way, for the token estimates.

/// What the bytes are.
#[derive(Debug, PartialEq, Eq)]
pub struct Sniffed {
    pub media_type: &'static str,
    pub width: Option<u32>,
    pub height: Option<u32>,
    pub pages: Option<u32>,
}

impl Sniffed {
    fn of(media_type: &'static str) -> Self {
        Self {
            media_type,
            width: None,
            height: None,
            pages: None,
        }
    }

    fn sized(media_type: &'static str, size: Option<(u32, u32)>) -> Self {
        Self {
            width: size.map(|s| s.0),
            height: size.map(|s| s.1),
            ..Self::of(media_type)
        }
    }
}

/// The accepted type `bytes` are, or `None`. Text is UTF-8 without NUL bytes; whether it is
/// Markdown only the name or the declared type can say (`markdown`).
pub fn sniff(bytes: &[u8], markdown: bool) -> Option<Sniffed> {
    if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        return Some(Sniffed::sized("image/png", png_size(bytes)));
    }
    if bytes.starts_with(&[0xFF, 0xD8, 0xFF]) {
        return Some(Sniffed::sized("image/jpeg", jpeg_size(bytes)));
    }
    if bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a") {
        let size = (bytes.len() >= 10).then(|| (le16(bytes, 6), le16(bytes, 8)));
        return Some(Sniffed::sized("image/gif", size));
    }
    if bytes.len() >= 16 && &bytes[..4] == b"RIFF" && &bytes[8..12] == b"WEBP" {
        return Some(Sniffed::sized("image/webp", webp_size(bytes)));
    }
    if bytes.starts_with(b"%PDF-") {
        return Some(Sniffed {
            pages: pdf_pages(bytes),
            ..Sniffed::of("application/pdf")
        });
    }
    if !bytes.is_empty() && !bytes.contains(&0) && std::str::from_utf8(bytes).is_ok() {
        return Some(Sniffed::of(if markdown {
            "text/markdown"
        } else {
            "text/plain"
        }));
    }
    None
}

fn be16(b: &[u8], at: usize) -> u32 {
    u32::from(b[at]) << 8 | u32::from(b[at + 1])
}

fn le16(b: &[u8], at: usize) -> u32 {
    u32::from(b[at + 1]) << 8 | u32::from(b[at])
}

fn le24(b: &[u8], at: usize) -> u32 {
    u32::from(b[at + 2]) << 16 | le16(b, at)
}

/// The IHDR chunk, first after the signature: width and height, big-endian.
fn png_size(b: &[u8]) -> Option<(u32, u32)> {
    if b.len() < 24 || &b[12..16] != b"IHDR" {
        return None;
    }
    let be32 = |at: usize| be16(b, at) << 16 | be16(b, at + 2);
    Some((be32(16), be32(20)))
}

/// The first start-of-frame segment's height and width.
fn jpeg_size(b: &[u8]) -> Option<(u32, u32)> {
    let mut at = 2;
    while at + 9 < b.len() {
        if b[at] != 0xFF {
            return None;
        }
        let marker = b[at + 1];
        if marker == 0xFF {
            at += 1; // fill byte
            continue;
        }
        let length = be16(b, at + 2) as usize;
        let is_frame = (0xC0..=0xCF).contains(&marker) && ![0xC4, 0xC8, 0xCC].contains(&marker);
        if is_frame {
            return Some((be16(b, at + 7), be16(b, at + 5)));
        }
        at += 2 + length;
    }
    None
}

/// VP8 (lossy), VP8L (lossless) or VP8X (extended) headers.
fn webp_size(b: &[u8]) -> Option<(u32, u32)> {
    match (&b[12..16], b.len()) {
        (b"VP8 ", n) if n >= 30 => Some((le16(b, 26) & 0x3FFF, le16(b, 28) & 0x3FFF)),
        (b"VP8L", n) if n >= 25 => {
            let bits = u32::from(b[21])
                | u32::from(b[22]) << 8
                | u32::from(b[23]) << 16
                | u32::from(b[24]) << 24;
            Some(((bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1))
        }
        (b"VP8X", n) if n >= 30 => Some((le24(b, 24) + 1, le24(b, 27) + 1)),
        _ => None,
    }
}

/// The least a page of a PDF is assumed to take when its pages cannot be seen: a compressed
/// page of text with its share of the fonts takes about this much.
const PDF_PAGE_BYTES: usize = 10 * 1024;

/// Page objects (`/Type /Page`, not `/Pages`) in the file's plain text; `None` when none can
/// be seen. Pages in compressed object streams (`/ObjStm`, PDF 1.5 on) cannot be seen, and one
/// visible page would stand for all of them (a budget's estimate gamed): a file with object
/// streams counts at least a page per [`PDF_PAGE_BYTES`].
fn pdf_pages(b: &[u8]) -> Option<u32> {
    let mut pages = 0u32;
    let mut counted = 0u32;
    let mut streams = false;
    // Every `/` by memchr, then a look at what follows: a substring searcher would add its
    // own code to the Worker for this one scan.
    for at in memchr::memchr_iter(b'/', b) {
        let rest = &b[at..];
        if rest.starts_with(b"/ObjStm") {
            streams = true;
            continue;
        }
        // A page tree's `/Count n`: its root's is the whole document's, pages typed or not.
        if let Some(rest) = rest.strip_prefix(b"/Count") {
            let skip = rest.iter().take_while(|c| c.is_ascii_whitespace()).count();
            let digits: u32 = rest[skip..]
                .iter()
                .take_while(|c| c.is_ascii_digit())
                .take(9)
                .fold(0, |n, d| n * 10 + u32::from(d - b'0'));
            counted = counted.max(digits);
            continue;
        }
        let Some(rest) = rest.strip_prefix(b"/Type") else {
            continue;
        };
        let skip = rest.iter().take_while(|c| c.is_ascii_whitespace()).count();
        let rest = &rest[skip..];
        if rest.starts_with(b"/Page") && !rest[5..].first().is_some_and(u8::is_ascii_alphabetic) {
            pages = pages.saturating_add(1);
        }
    }
    pages = pages.max(counted);
    if streams {
        pages = pages.max(u32::try_from(b.len() / PDF_PAGE_BYTES + 1).unwrap_or(u32::MAX));
    }
    (pages > 0).then_some(pages)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 1x1 PNG (the smallest valid one).
    pub const PNG: &[u8] = &[
        0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 0x00, 0x00, 0x00, 0x0D, 0x49, 0x48, 0x44,
        0x52, 0x00, 0x00, 0x02, 0x80, 0x00, 0x00, 0x01, 0xE0, 0x08, 0x06, 0x00, 0x00, 0x00,
    ];

    #[test]
    fn images_are_known_by_their_magic_numbers_with_their_size() {
        assert_eq!(
            sniff(PNG, false),
            Some(Sniffed::sized("image/png", Some((640, 480))))
        );
        let gif = b"GIF89a\x20\x03\x58\x02rest";
        assert_eq!(
            sniff(gif, false),
            Some(Sniffed::sized("image/gif", Some((800, 600))))
        );
        // A JPEG: SOI, an APP0 segment of 16 bytes, then SOF0 with height 0x0168, width 0x01E0.
        let mut jpeg = vec![0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x10];
        jpeg.extend([0; 14]);
        jpeg.extend([0xFF, 0xC0, 0x00, 0x11, 0x08, 0x01, 0x68, 0x01, 0xE0, 0x03]);
        assert_eq!(
            sniff(&jpeg, false),
            Some(Sniffed::sized("image/jpeg", Some((480, 360))))
        );
        // An extended WebP: canvas 1024x768 stored minus one, 24-bit little-endian.
        let mut webp = b"RIFF\0\0\0\0WEBPVP8X\x0a\0\0\0\0\0\0\0".to_vec();
        webp.extend([0xFF, 0x03, 0x00, 0xFF, 0x02, 0x00]);
        assert_eq!(
            sniff(&webp, false),
            Some(Sniffed::sized("image/webp", Some((1024, 768))))
        );
    }

    #[test]
    fn a_pdf_is_counted_in_pages_and_text_is_utf8_without_nuls() {
        let pdf = b"%PDF-1.7\n1 0 obj <</Type /Pages /Count 2>>\n2 0 obj <</Type/Page>>\n3 0 obj <</Type /Page /Parent 1 0 R>>";
        assert_eq!(sniff(pdf, false).map(|s| s.pages), Some(Some(2)));
        assert_eq!(
            sniff("# Notes\n\nÉté".as_bytes(), true).map(|s| s.media_type),
            Some("text/markdown")
        );
        assert_eq!(
            sniff(b"plain", false).map(|s| s.media_type),
            Some("text/plain")
        );
        // Not a PNG, whatever it claims: bytes of no accepted type.
        assert_eq!(sniff(b"\x00\x01binary", false), None);
        assert_eq!(sniff(b"\xff\xfe not utf-8", false), None);
        assert_eq!(sniff(b"", false), None);
    }

    #[test]
    fn pages_hidden_in_object_streams_are_counted_by_the_files_size() {
        // One visible page and the rest in object streams once counted as one page.
        let mut pdf =
            b"%PDF-1.7\n1 0 obj <</Type /ObjStm /N 99 /First 500 /Filter /FlateDecode>> stream\n"
                .to_vec();
        pdf.extend(std::iter::repeat_n(0x9c, 200 * 1024));
        pdf.extend_from_slice(b"\nendstream\n2 0 obj <</Type /Page>>");
        assert_eq!(sniff(&pdf, false).map(|s| s.pages), Some(Some(21)));
    }

    #[test]
    fn a_page_trees_count_stands_for_pages_it_does_not_type() {
        // Pages found through `/Kids` need no `/Type`: the root's `/Count` says how many.
        let pdf = b"%PDF-1.4\n1 0 obj <</Type /Pages /Kids [2 0 R] /Count 100>> endobj\n2 0 obj <<>> endobj";
        assert_eq!(sniff(pdf, false).map(|s| s.pages), Some(Some(100)));
    }
}
