//! verbs-api
