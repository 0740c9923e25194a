//! A user's files in each provider's request: the form each wire API documents for images,
//! PDFs and text files.

use std::rc::Rc;

use serde_json::{json, Value};

use super::testing::ScriptedTransport;
use super::{Anthropic, Gemini, Ollama, OpenAiChat};
use crate::llm::{
    Attachment, ContentBlock, FileData, HttpTransport, LlmRequest, Message, ModelRef, Provider,
};

fn file(media_type: &str, name: &str, data: FileData) -> ContentBlock {
    ContentBlock::File(Attachment {
        id: format!("f-{name}"),
        media_type: media_type.into(),
        size: 10,
        name: Some(name.into()),
        width: None,
        height: None,
        pages: None,
        data: Some(data),
    })
}

fn messages() -> Vec<Message> {
    vec![Message::User {
        content: vec![
            ContentBlock::Text {
                text: "what is in these?".into(),
            },
            file("image/png", "cat.png", FileData::Base64("iVBORw0K".into())),
            file(
                "application/pdf",
                "r.pdf",
                FileData::Base64("JVBERi0x".into()),
            ),
            file(
                "text/plain",
                "n.txt",
                FileData::Text("<file name=\"n.txt\">\nhello\n</file>".into()),
            ),
        ],
    }]
}

/// The body `provider` sends for [`messages`].
fn sent(make: impl Fn(Rc<dyn HttpTransport>) -> Box<dyn Provider>) -> Value {
    sent_for(make, messages())
}

/// The body `provider` sends for `messages`.
fn sent_for(
    make: impl Fn(Rc<dyn HttpTransport>) -> Box<dyn Provider>,
    messages: Vec<Message>,
) -> Value {
    let transport = ScriptedTransport::new(vec![]);
    let provider = make(transport.clone());
    let request = LlmRequest {
        system: None,
        messages: &messages,
        tools: &[],
        max_tokens: 100,
        temperature: None,
        call_ids: "call_1_",
        billing: None,
        answer: None,
    };
    futures::executor::block_on(provider.stream(&request, &mut |_| {}));
    let sent = transport.last_request.borrow().clone().unwrap();
    serde_json::from_str(&sent.body).unwrap()
}

fn model(id: &str) -> ModelRef {
    ModelRef::parse(id).unwrap()
}

#[test]
fn anthropic_gets_image_and_document_blocks() {
    let body = sent(|t| {
        Box::new(Anthropic::provider(
            model("anthropic:claude-sonnet-4-5"),
            None,
            None,
            t,
        ))
    });
    assert_eq!(
        body["messages"][0]["content"],
        json!([
            {"type": "text", "text": "what is in these?"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0K"}},
            {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0x"}, "title": "r.pdf"},
            {"type": "text", "text": "<file name=\"n.txt\">\nhello\n</file>"},
        ])
    );
}

#[test]
fn openai_gets_image_url_and_file_parts() {
    let body = sent(|t| Box::new(OpenAiChat::provider(model("openai:gpt-4o"), None, None, t)));
    assert_eq!(
        body["messages"][0],
        json!({"role": "user", "content": [
            {"type": "text", "text": "what is in these?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0K"}},
            {"type": "file", "file": {"filename": "r.pdf", "file_data": "data:application/pdf;base64,JVBERi0x"}},
            {"type": "text", "text": "<file name=\"n.txt\">\nhello\n</file>"},
        ]})
    );
}

#[test]
fn gemini_gets_inline_data() {
    let body = sent(|t| {
        Box::new(Gemini::provider(
            model("gemini:gemini-2.5-flash"),
            None,
            None,
            t,
        ))
    });
    assert_eq!(
        body["contents"][0]["parts"],
        json!([
            {"text": "what is in these?"},
            {"inlineData": {"mimeType": "image/png", "data": "iVBORw0K"}},
            {"inlineData": {"mimeType": "application/pdf", "data": "JVBERi0x"}},
            {"text": "<file name=\"n.txt\">\nhello\n</file>"},
        ])
    );
}

#[test]
fn ollama_gets_images_beside_the_text() {
    let body = sent(|t| Box::new(Ollama::provider(model("ollama:llava"), None, t)));
    // (A PDF never reaches Ollama: `prepare_for` makes it a note first.)
    assert_eq!(
        body["messages"][0],
        json!({
            "role": "user",
            "content": "what is in these?\n\n<file name=\"n.txt\">\nhello\n</file>",
            "images": ["iVBORw0K", "JVBERi0x"],
        })
    );
}

#[test]
fn a_message_of_text_only_stays_a_string_for_openai() {
    let body = sent_for(
        |t| Box::new(OpenAiChat::provider(model("openai:gpt-4o"), None, None, t)),
        vec![Message::user_text("hi")],
    );
    assert_eq!(
        body["messages"][0],
        json!({"role": "user", "content": "hi"})
    );
}
