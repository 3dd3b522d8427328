//! Writing responses: the status line and the headers every response
//! carries, then the body.

use std::io::Write;

/// TechEmpower's plaintext body.
pub(crate) const PLAINTEXT: &[u8] = b"Hello, World!";

/// TechEmpower's json body, serialized per request.
#[derive(serde::Serialize)]
pub(crate) struct Message {
    pub(crate) message: &'static str,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Status {
    Ok,
    BadRequest,
    NotFound,
    MethodNotAllowed,
    RequestTimeout,
    BodyTooLarge,
    HeadTooLarge,
    NotImplemented,
}

impl Status {
    fn line(self) -> &'static [u8] {
        match self {
            Status::Ok => b"HTTP/1.1 200 OK\r\n",
            Status::BadRequest => b"HTTP/1.1 400 Bad Request\r\n",
            Status::NotFound => b"HTTP/1.1 404 Not Found\r\n",
            Status::MethodNotAllowed => b"HTTP/1.1 405 Method Not Allowed\r\n",
            Status::RequestTimeout => b"HTTP/1.1 408 Request Timeout\r\n",
            Status::BodyTooLarge => b"HTTP/1.1 413 Content Too Large\r\n",
            Status::HeadTooLarge => b"HTTP/1.1 431 Request Header Fields Too Large\r\n",
            Status::NotImplemented => b"HTTP/1.1 501 Not Implemented\r\n",
        }
    }

    /// The body of an error response: what was wrong, for a person.
    pub(crate) fn explanation(self) -> &'static str {
        match self {
            Status::Ok => "",
            Status::BadRequest => "malformed request\n",
            Status::NotFound => "not found; the routes are GET /plaintext, GET /json, POST /echo\n",
            Status::MethodNotAllowed => "method not allowed on this path (see Allow)\n",
            Status::RequestTimeout => "the request did not arrive within the header timeout\n",
            Status::BodyTooLarge => "request body over the server's limit\n",
            Status::HeadTooLarge => "request line and headers over the server's limit\n",
            Status::NotImplemented => "chunked request bodies are not supported; send Content-Length\n",
        }
    }
}

/// A response's head, built and then written with its body.
pub(crate) struct Response<'a> {
    status: Status,
    date: &'a [u8; 29],
    content_type: &'static str,
    allow: Option<&'static str>,
    connection: Option<&'static str>,
}

impl<'a> Response<'a> {
    pub(crate) fn new(status: Status, date: &'a [u8; 29]) -> Response<'a> {
        Response { status, date, content_type: "text/plain", allow: None, connection: None }
    }
    pub(crate) fn content_type(mut self, content_type: &'static str) -> Self {
        self.content_type = content_type;
        self
    }
    pub(crate) fn allow(mut self, methods: &'static str) -> Self {
        self.allow = Some(methods);
        self
    }
    pub(crate) fn close(mut self) -> Self {
        self.connection = Some("close");
        self
    }
    /// For an HTTP/1.0 client that asked to keep the connection.
    pub(crate) fn keep_alive(mut self) -> Self {
        self.connection = Some("keep-alive");
        self
    }

    pub(crate) fn write(self, out: &mut Vec<u8>, body: &[u8]) {
        self.write_head_only(out, body.len());
        out.extend_from_slice(body);
    }

    /// The head of a response whose body is `len` bytes (HEAD requests).
    pub(crate) fn write_head_only(self, out: &mut Vec<u8>, len: usize) {
        out.extend_from_slice(self.status.line());
        // Writing to a Vec cannot fail.
        let _ = write!(out, "Content-Length: {len}\r\nContent-Type: {}\r\nServer: iomux\r\nDate: ", self.content_type);
        out.extend_from_slice(self.date);
        out.extend_from_slice(b"\r\n");
        if let Some(allow) = self.allow {
            let _ = write!(out, "Allow: {allow}\r\n");
        }
        if let Some(connection) = self.connection {
            let _ = write!(out, "Connection: {connection}\r\n");
        }
        out.extend_from_slice(b"\r\n");
    }
}
