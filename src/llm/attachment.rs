//! A file in a user's message (an image, a PDF, a text file): the reference history keeps, the
//! contents a call carries, which models can see it, and what it costs in tokens.
//!
//! History never holds a file's bytes: a [`ContentBlock::File`](super::ContentBlock::File) is the
//! reference, and the application fills in [`Attachment::data`] for the call it is about to make
//! (the bytes live elsewhere, in R2 for the Worker). A model that cannot see the file gets a
//! short note instead ([`Attachment::note`]), so a conversation can move to a text-only model.

use std::sync::Arc;

use serde::Serialize;

use super::capabilities::Capabilities;

/// A file the user attached.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Attachment {
    pub id: String,
    /// Decided from the file's bytes, never taken from what the client declared.
    pub media_type: String,
    /// In bytes.
    pub size: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// An image's pixels, read from its header: what its tokens are estimated from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub width: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub height: Option<u32>,
    /// A PDF's page count, as far as a scan of the file could tell.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pages: Option<u32>,
    /// The contents, for the call being made only: never stored.
    #[serde(skip)]
    pub data: Option<FileData>,
}

crate::json_struct!(Attachment {
    "id" => id,
    "media_type" => media_type,
    "size" => size,
    "name" => name,
    "width" => width,
    "height" => height,
    "pages" => pages,
    "data" => data: default_with(never_stored),
});

/// `data` is never stored: a key of that name is read past, as serde's `skip` did.
fn never_stored<T>(r: &mut crate::llm::json::Reader<'_>) -> crate::llm::json::Result<Option<T>> {
    r.skip()?;
    Ok(None)
}

/// A file's contents as a provider request carries them.
#[derive(Debug, Clone, PartialEq)]
pub enum FileData {
    /// Base64 (standard alphabet, padded), for images and PDFs.
    Base64(Arc<str>),
    /// A text file as the model reads it: its contents framed with its name.
    Text(Arc<str>),
}

/// What sort of file it is, which decides who can see it and how it is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    Image,
    Pdf,
    Text,
}

/// The media types accepted, and what each is.
pub const MEDIA_TYPES: &[(&str, FileKind)] = &[
    ("image/png", FileKind::Image),
    ("image/jpeg", FileKind::Image),
    ("image/gif", FileKind::Image),
    ("image/webp", FileKind::Image),
    ("application/pdf", FileKind::Pdf),
    ("text/plain", FileKind::Text),
    ("text/markdown", FileKind::Text),
];

impl Attachment {
    pub fn kind(&self) -> FileKind {
        MEDIA_TYPES
            .iter()
            .find(|(t, _)| *t == self.media_type)
            .map_or(FileKind::Text, |(_, kind)| *kind)
    }

    /// Whether `provider`'s model with `capabilities` can take this file as itself. Text files
    /// go to every model as text; images to models with vision; PDFs to the providers that read
    /// documents (Anthropic, OpenAI, Gemini), with vision.
    pub fn seen_by(&self, provider: &str, capabilities: &Capabilities) -> bool {
        match self.kind() {
            FileKind::Text => true,
            FileKind::Image => capabilities.vision,
            FileKind::Pdf => {
                capabilities.vision && matches!(provider, "anthropic" | "openai" | "gemini")
            }
        }
    }

    /// What a model that cannot see the file (or whose contents could not be read) is told
    /// instead.
    pub fn note(&self, why: &str) -> String {
        format!(
            "[The user attached {} ({}, {}); {why}.]",
            self.name
                .as_deref()
                .map_or_else(|| "a file".to_string(), |n| format!("\"{n}\"")),
            self.media_type,
            human_size(self.size),
        )
    }

    /// The note for a model that cannot see this sort of file.
    pub fn unseen_note(&self) -> String {
        self.note(match self.kind() {
            FileKind::Image => "this model cannot see images, so it is not shown",
            FileKind::Pdf => "this model cannot read PDFs, so it is not shown",
            FileKind::Text => "it could not be read",
        })
    }

    /// A text file as the model reads it.
    pub fn framed_text(&self, text: &str) -> String {
        format!(
            "<file name=\"{}\" media_type=\"{}\">\n{text}\n</file>",
            self.name.as_deref().unwrap_or("file").replace('"', "'"),
            self.media_type
        )
    }

    /// Estimated input tokens, by `provider`'s published rule of thumb (`None`: the largest of
    /// them, for counting before the model is known).
    pub fn tokens(&self, provider: Option<&str>) -> u64 {
        match self.kind() {
            FileKind::Text => self.size / 4 + 16,
            FileKind::Image => {
                // A file whose size could not be read counts as a large photo.
                let (w, h) = match (self.width, self.height) {
                    (Some(w), Some(h)) if w > 0 && h > 0 => (u64::from(w), u64::from(h)),
                    _ => (2048, 2048),
                };
                match provider {
                    Some("openai") => openai_image_tokens(w, h),
                    Some("gemini") => gemini_image_tokens(w, h),
                    Some(_) => anthropic_image_tokens(w, h),
                    None => anthropic_image_tokens(w, h)
                        .max(openai_image_tokens(w, h))
                        .max(gemini_image_tokens(w, h)),
                }
            }
            FileKind::Pdf => {
                // Without a page count, one page per 50 KB.
                let pages = u64::from(self.pages.unwrap_or(0)).max(self.size / 50_000 + 1);
                match provider {
                    Some("gemini") => pages * 258,
                    // Anthropic: each page's text plus the page as an image, 1,500-3,000 tokens.
                    _ => pages * 2_300,
                }
            }
        }
    }
}

/// Anthropic: an image is scaled to fit 1568 px on its long side and about 1,600 tokens, then
/// costs width × height / 750 tokens.
fn anthropic_image_tokens(w: u64, h: u64) -> u64 {
    let (w, h) = fit(w, h, 1568);
    (w * h).div_ceil(750).min(1_600)
}

/// OpenAI (high detail): fit within 2048 px, then the short side to 768 px; 170 tokens per
/// 512 px tile plus 85.
fn openai_image_tokens(w: u64, h: u64) -> u64 {
    let (w, h) = fit(w, h, 2048);
    let short = w.min(h);
    let (w, h) = if short > 768 {
        (w * 768 / short, h * 768 / short)
    } else {
        (w, h)
    };
    85 + 170 * w.div_ceil(512) * h.div_ceil(512)
}

/// Gemini: 258 tokens for an image at most 384 px on both sides, else 258 per 768 px tile.
fn gemini_image_tokens(w: u64, h: u64) -> u64 {
    if w <= 384 && h <= 384 {
        258
    } else {
        258 * w.div_ceil(768) * h.div_ceil(768)
    }
}

/// `(w, h)` scaled down, keeping its shape, so neither side passes `max`.
fn fit(w: u64, h: u64, max: u64) -> (u64, u64) {
    let long = w.max(h);
    if long <= max {
        (w, h)
    } else {
        ((w * max / long).max(1), (h * max / long).max(1))
    }
}

fn human_size(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 20 => format!("{:.1} MB", b as f64 / f64::from(1 << 20)),
        b if b >= 1 << 10 => format!("{} KB", b.div_ceil(1 << 10)),
        b => format!("{b} bytes"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(w: u32, h: u32) -> Attachment {
        Attachment {
            id: "f1".into(),
            media_type: "image/png".into(),
            size: 123_456,
            name: Some("cat.png".into()),
            width: Some(w),
            height: Some(h),
            pages: None,
            data: None,
        }
    }

    #[test]
    fn an_image_costs_what_each_provider_publishes() {
        // Anthropic's table: 1092x1092 is about 1,590 tokens; 200x200 about 54.
        assert_eq!(image(1092, 1092).tokens(Some("anthropic")), 1590);
        assert_eq!(image(200, 200).tokens(Some("anthropic")), 54);
        // OpenAI's example: 1024x1024 is 765 tokens; 2048x4096 is 1,105.
        assert_eq!(image(1024, 1024).tokens(Some("openai")), 765);
        assert_eq!(image(2048, 4096).tokens(Some("openai")), 1105);
        // Gemini: small images 258, larger ones 258 per 768 px tile.
        assert_eq!(image(300, 300).tokens(Some("gemini")), 258);
        assert_eq!(image(1000, 1000).tokens(Some("gemini")), 1032);
        // Before the model is known: the most any of them charges.
        assert_eq!(image(1024, 1024).tokens(None), 1399);
    }

    #[test]
    fn a_model_sees_what_its_capabilities_allow_and_is_told_of_the_rest() {
        let vision = Capabilities {
            tools: true,
            thinking: false,
            vision: true,
            structured_output: false,
        };
        let text_only = Capabilities {
            vision: false,
            ..vision
        };
        let pdf = Attachment {
            media_type: "application/pdf".into(),
            name: Some("report.pdf".into()),
            ..image(1, 1)
        };
        assert!(image(10, 10).seen_by("ollama", &vision));
        assert!(!image(10, 10).seen_by("openai", &text_only));
        assert!(pdf.seen_by("anthropic", &vision));
        assert!(!pdf.seen_by("ollama", &vision));
        assert_eq!(
            image(10, 10).unseen_note(),
            "[The user attached \"cat.png\" (image/png, 121 KB); this model cannot see images, \
             so it is not shown.]"
        );
    }

    #[test]
    fn the_reference_is_stored_and_the_contents_never_are() {
        let mut file = image(640, 480);
        file.data = Some(FileData::Base64("iVBORw0KGgo=".into()));
        let json = serde_json::to_string(&file).unwrap();
        assert_eq!(
            json,
            r#"{"id":"f1","media_type":"image/png","size":123456,"name":"cat.png","width":640,"height":480}"#
        );
        let back: Attachment = crate::llm::json::from_str(&json).unwrap();
        assert_eq!(back, Attachment { data: None, ..file });
    }
}
