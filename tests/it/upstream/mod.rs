mod connections;
mod deadlines;
mod forwarding;
mod http1;
mod pools;
mod resend;
